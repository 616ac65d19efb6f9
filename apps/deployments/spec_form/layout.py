"""The form as the template lays it out: each field with its value, kind, choices and the problems placed on it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..topology.spec import (
    DP_STYLES,
    DTYPE_BYTES,
    HASH_KEYS,
    KV_LAYOUTS,
    LAUNCH_PROFILES,
    LOAD_FAILURE_POLICIES,
    MEMCACHE_PROTOCOLS,
    POLICIES,
    POOL_BACKENDS,
    ROLES,
)
from .state import (
    INSTANCE_INTS,
    INSTANCE_KEPT,
    KEPT_TOP,
    TOP_BOOLS,
    TOP_INTS,
    TOP_TEXT,
    FormProblem,
    FormState,
    is_blank_instance,
    kept_fields,
)


@dataclass
class Field:
    name: str
    value: str
    kind: str = "text"  # text | number | select | checkbox
    choices: list[tuple[str, str]] = field(default_factory=list)
    problems: list[FormProblem] = field(default_factory=list)
    label: str = ""
    list_id: str = ""  # a text field's <datalist> of suggestions
    placeholder: str = ""

    @property
    def html_id(self) -> str:
        return "f-" + re.sub(r"[^A-Za-z0-9]+", "-", self.name).strip("-")


def _choices(options, current: str, *, blank: str | None = None) -> list[tuple[str, str]]:
    out = [("", blank)] if blank is not None else []
    out += [(o, o) for o in options]
    if current and current not in options:
        out.append((current, f"{current} (not offered here)"))
    return out


class _Fields:
    """Makes the Fields of one form, each with the problems placed on it, and remembers which names it made."""

    def __init__(self, problems: list[FormProblem]):
        self.by_field: dict[str, list[FormProblem]] = {}
        for p in problems:
            self.by_field.setdefault(p.field, []).append(p)
        self.placed: set[str] = set()

    def __call__(self, name: str, value: str, kind: str = "text", choices=None, label: str = "") -> Field:
        self.placed.add(name)
        return Field(name, value, kind, choices or [], self.by_field.get(name, []),
                     label or name.rsplit(".", 1)[-1])

    def select(self, name: str, value: str, options, *, blank: str | None = None) -> Field:
        return self(name, value, "select", _choices(options, value, blank=blank))

    def row_problems(self, prefix: str) -> list[FormProblem]:
        self.placed.add(prefix)
        return self.by_field.get(prefix, [])


def form_context(state: FormState, problems: list[FormProblem], *, npu_nodes: list[str],
                 all_nodes: list[str]) -> dict:
    """Fields grouped as the template lays them out, each with the problems placed on it; problems whose field
    is not on the page come back in `unplaced`."""
    f = _Fields(problems)
    top = _top_fields(f, state.top, all_nodes)
    instances = [_instance_row(f, index, row) for index, row in enumerate(state.instances)]
    servers = [{"index": index, "problems": f.row_problems(f"store.servers[{index}]"), "f": {
        "node": f.select(f"store.servers[{index}].node", server.get("node", ""), all_nodes, blank="—"),
        "port": f(f"store.servers[{index}].port", server.get("port", ""), "number"),
        "remove": f(f"store.servers[{index}].remove", server.get("remove", ""), "checkbox")}}
        for index, server in enumerate(state.servers)]
    kept_top = kept_fields(state.keep, KEPT_TOP) or {}
    return {"top": top, "instances": instances, "servers": servers, "keep": state.keep, "npu_nodes": npu_nodes,
            "kept_top": _kept_lines(kept_top), "keep_problems": f.by_field.get("keep", []),
            "instances_problems": f.by_field.get("instances", []),
            "servers_problems": f.by_field.get("store.servers", []),
            "unplaced": [p for p in problems if p.field not in f.placed | {"keep", "instances", "store.servers"}]}


def _top_fields(f: _Fields, top: dict[str, str], all_nodes: list[str]) -> dict[str, Field]:
    """The fields outside the instance and server tables, keyed for the template (dots become underscores)."""
    t = {name: f(name, top.get(name, ""), "number" if name in TOP_INTS else "text") for name in TOP_TEXT + TOP_INTS}
    for name, options in (("launch_profile", LAUNCH_PROFILES), ("model.profile.dtype", tuple(DTYPE_BYTES)),
                          ("model.profile.kv_layout", KV_LAYOUTS), ("proxy.policy", POLICIES)):
        t[name] = f.select(name, top.get(name, ""), options)
    for name, blank in (("kv_pool.node", "— no KV pool —"), ("proxy.node", "— choose —"),
                        ("bench_client.node", "— no bench client —")):
        t[name] = f.select(name, top.get(name, ""), all_nodes, blank=blank)
    t["proxy.hash_key"] = f.select("proxy.hash_key", top.get("proxy.hash_key", ""), HASH_KEYS, blank="— none —")
    t["kv_pool.backend"] = f.select("kv_pool.backend", top.get("kv_pool.backend", ""), POOL_BACKENDS)
    t["kv_pool.load_failure_policy"] = f.select("kv_pool.load_failure_policy",
                                                top.get("kv_pool.load_failure_policy", ""), LOAD_FAILURE_POLICIES,
                                                blank="— vLLM's default (fail) —")
    t["kv_pool.protocol"] = f.select("kv_pool.protocol", top.get("kv_pool.protocol", ""), MEMCACHE_PROTOCOLS,
                                     blank="—")
    t.update({name: f(name, top.get(name, ""), "checkbox") for name in TOP_BOOLS})
    return {name.replace(".", "_"): value for name, value in t.items()}


def _instance_row(f: _Fields, index: int, row: dict[str, str]) -> dict:
    p = f"instances[{index}]"
    cells = {k: f(f"{p}.{k}", row.get(k, ""), "number") for k in INSTANCE_INTS}
    cells["name"] = f(f"{p}.name", row.get("name", ""))
    cells["role"] = f.select(f"{p}.role", row.get("role", ""), ROLES)
    # One node, or every node the instance spans ("node2, node3": the first is the DP master).
    cells["node"] = f(f"{p}.node", row.get("node", ""), "nodes")
    cells["node"].list_id, cells["node"].placeholder = "npu-nodes", "node2, node3"
    cells["engine_id"] = f(f"{p}.engine_id", row.get("engine_id", ""))
    cells["dp_style"] = f.select(f"{p}.dp_style", row.get("dp_style", ""), DP_STYLES)
    cells["expert_parallel"] = f(f"{p}.expert_parallel", row.get("expert_parallel", ""), "checkbox")
    cells["remove"] = f(f"{p}.remove", row.get("remove", ""), "checkbox")
    cells["keep"] = f(f"{p}.keep", row.get("keep", "{}"))
    kept = kept_fields(row.get("keep", ""), INSTANCE_KEPT) or {}
    return {"f": cells, "index": index, "kept": _kept_lines(kept), "kept_keys": ", ".join(kept),
            "problems": f.row_problems(p), "spare": is_blank_instance(row)}


def _kept_lines(kept: dict) -> list[str]:
    out = []
    for key, value in kept.items():
        if key == "env" and isinstance(value, dict):
            out += [f"env {k}={_env_text(k, v)}" for k, v in value.items()]
        elif key == "extra_args" and isinstance(value, list):
            out.append("extra_args " + " ".join(map(str, value)))
        else:
            out.append(f"{key}: {json.dumps(value)}")
    return out


def _env_text(name: str, value) -> str:
    """A plain value as is; {prepend, append, separator} as the shell would see it: /x/mooncake:$LD_LIBRARY_PATH."""
    if not isinstance(value, dict):
        return str(value)
    sep = str(value.get("separator", ":"))
    parts = [str(value[k]) for k in ("prepend",) if value.get(k)] + [f"${name}"]
    parts += [str(value["append"])] if value.get("append") else []
    return sep.join(parts) + "  (keeps the node's value)"
