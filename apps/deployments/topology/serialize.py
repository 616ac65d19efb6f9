"""TopologySpec <-> plain dict <-> YAML, and the field-by-field diff shown between two revisions."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

import yaml

import plainyaml
from sshexec import EnvExtend

from .parse import spec_from_dict
from .spec import ContainerSpec, InstanceSpec, KvPoolSpec, ModelProfile, SpecError, TopologySpec

_TOP_DEFAULTS = {"kv_connector": "pull", "runtime": "host"}
# ModelProfile fields left out of the plain form while they hold their default (a profile spelt out as before)
_PROFILE_DEFAULTS = {"weights": "bfloat16", "expert_params_b": 0.0, "unquantized_params_b": 0.0}


def spec_to_dict(spec: TopologySpec) -> dict[str, Any]:
    """Plain data that spec_from_dict turns back into an equal spec. Unset optionals (None) are left out."""
    return _plain(spec)


def _plain(value: Any) -> Any:
    if isinstance(value, InstanceSpec):
        # `node: a` for one node, `nodes: [a, b]` for an instance spanning several (never both).
        drop = {"nodes"} if not value.nodes else {"node"}
        return {k: v for k, v in _fields(value).items() if k not in drop}
    if isinstance(value, ModelProfile):
        if value.name:  # a catalog entry stays its name
            return value.name
        return {k: v for k, v in _fields(value).items() if _PROFILE_DEFAULTS.get(k, object()) != v}
    if isinstance(value, EnvExtend):
        out = {k: v for k, v in (("prepend", value.prepend), ("append", value.append)) if v}
        return out if value.separator == ":" else {**out, "separator": value.separator}
    if isinstance(value, TopologySpec):  # kv_connector and runtime only when not the default, as specs were written
        return {k: v for k, v in _fields(value).items() if _TOP_DEFAULTS.get(k, object()) != v}
    if isinstance(value, ContainerSpec):  # digest only where given
        return {k: v for k, v in _fields(value).items() if k != "digest" or v}
    if isinstance(value, KvPoolSpec):
        memcache_only = ("config_store_port", "protocol", "install_path")
        # prefer_local only when it differs from the guide's value, so a form that keeps it cannot carry it into a
        # memcache pool by accident.
        drop = ("prefer_local",) if value.backend == "memcache" or value.prefer_local else ()
        return {k: v for k, v in _fields(value).items() if k not in drop + (() if value.backend == "memcache"
                                                                             else memcache_only)}
    if is_dataclass(value):
        return _fields(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _fields(value: Any) -> dict[str, Any]:
    return {f.name: _plain(getattr(value, f.name)) for f in fields(value) if getattr(value, f.name) is not None}


def spec_from_yaml(text: str, *, deployment_name: str | None = None) -> TopologySpec:
    """Parse YAML (safe types, no aliases); a syntax error names its line and column."""
    try:
        data = plainyaml.load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise SpecError([("yaml", f"syntax error at {where}{exc.problem or exc}")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([("yaml", f"syntax error: {exc}")]) from None
    return spec_from_dict(data, deployment_name=deployment_name)


def spec_to_yaml(spec: TopologySpec) -> str:
    return yaml.safe_dump(spec_to_dict(spec), sort_keys=False, allow_unicode=True, width=110)


def spec_diff(a: TopologySpec, b: TopologySpec) -> list[tuple[str, Any, Any]]:
    """(path, old, new) for every leaf that differs. Instances are matched by name, not position, so inserting
    one does not show every later instance as changed: paths read `instances[d1].tp`. An added or removed
    instance is one entry whose old or new side is None."""
    out: list[tuple[str, Any, Any]] = []
    da, db = spec_to_dict(a), spec_to_dict(b)
    ia = {i["name"]: i for i in da.pop("instances")}
    ib = {i["name"]: i for i in db.pop("instances")}
    _diff("", da, db, out)
    for name in list(ia) + [n for n in ib if n not in ia]:
        _diff(f"instances[{name}]", ia.get(name), ib.get(name), out)
    return out


def _diff(path: str, old: Any, new: Any, out: list) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            _diff(f"{path}.{key}" if path else str(key), old.get(key), new.get(key), out)
    elif old != new:
        out.append((path, old, new))
