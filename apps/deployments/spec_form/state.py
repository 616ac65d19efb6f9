"""The form editor's state: every value as the string the operator sees or typed, read from a stored spec or
from a POST, plus the helpers every part of the form shares (blank rows, the hidden JSON of fields it keeps)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from typing import Any

from ..topology.model_catalog import CATALOG
from ..topology.spec import InstanceSpec, KvPoolSpec

# An instance's node cell holds every node it spans, comma separated ("node2, node3"); one name is `node:`.
INSTANCE_TEXT = ("name", "role", "node", "dp_style", "engine_id")
INSTANCE_INTS = ("tp", "dp", "api_port", "kv_port", "dp_rpc_port", "ep_size", "max_num_seqs", "max_model_len")
INSTANCE_EDITED = INSTANCE_TEXT + INSTANCE_INTS + ("nodes", "expert_parallel")
# Every other instance field rides along in the row's hidden JSON (edited in YAML only): devices, extra_args, env
# today, and any field added to InstanceSpec later, so a new field is never dropped by a save from the form.
INSTANCE_KEPT = tuple(f.name for f in fields(InstanceSpec) if f.name not in INSTANCE_EDITED)
# store.memory_mb, proxy.admin_port, proxy.kv_events, kv_connector, runtime and container are edited in YAML only
KEPT_TOP = ("transfer_ports", "store", "proxy", "simulation", "kv_pool", "kv_connector", "mindie", "runtime", "container",
            "model_profile")  # a catalog profile's name, or a spelt-out profile's sizes (PROFILE_KEPT)
PROFILE_INTS = ("layers", "kv_heads", "head_dim", "attention_heads")
PROFILE_KEPT = ("weights", "params_b", "expert_params_b", "experts", "unquantized_params_b", "hidden_size",
                "max_position")  # the HBM fit check's sizes (docs/hbm-fit.md): edited in YAML only
KV_POOL_TEXT = ("backend", "segment_size", "load_failure_policy", "protocol", "install_path")
KV_POOL_INTS = ("rpc_port", "metrics_port", "config_store_port")
KV_POOL_BOOLS = ("consumer_is_to_load", "consumer_is_to_put")
KV_POOL_EDITED = ("node",) + KV_POOL_TEXT + KV_POOL_INTS + KV_POOL_BOOLS
KV_POOL_KEPT = tuple(f.name for f in fields(KvPoolSpec) if f.name not in KV_POOL_EDITED)  # none today
MEMCACHE_ONLY = ("kv_pool.protocol", "kv_pool.install_path", "kv_pool.config_store_port")
TOP_TEXT = ("launch_profile", "run_dir", "model.path", "model.served_name", "model.profile.dtype",
            "model.profile.kv_layout", "kv_pool.node", "proxy.node", "proxy.policy", "proxy.hash_key",
            "proxy.workers", "bench_client.node") + tuple(f"kv_pool.{k}" for k in KV_POOL_TEXT)
TOP_INTS = tuple(f"model.profile.{k}" for k in PROFILE_INTS) + tuple(f"kv_pool.{k}" for k in KV_POOL_INTS) + (
    "store.replicas", "proxy.port")
TOP_BOOLS = tuple(f"kv_pool.{k}" for k in KV_POOL_BOOLS)  # checkboxes: "on" | ""
SPARE_INSTANCE_ROWS = 1
SPARE_SERVER_ROWS = 1

_ROW_KEY = re.compile(r"^(instances|store\.servers)\[(\d+)\]\.([a-z_]+)$")
_NODE_SPLIT = re.compile(r"[\s,]+")


@dataclass
class FormState:
    """What the form shows: every value as the string the operator sees or typed."""

    top: dict[str, str] = field(default_factory=dict)
    instances: list[dict[str, str]] = field(default_factory=list)  # + "remove": "on"|"" and "keep": JSON
    servers: list[dict[str, str]] = field(default_factory=list)  # node, port, remove
    keep: str = "{}"  # top-level fields the form does not edit, as JSON

    def add_instance_row(self) -> None:
        self.instances.append(_blank_instance())

    def add_server_row(self) -> None:
        self.servers.append({"node": "", "port": "", "remove": ""})


@dataclass
class FormProblem:
    """A problem as the form shows it: `field` is the form field it sits next to ("" = the whole form)."""

    field: str
    label: str
    message: str
    suggestion: str = ""


@dataclass
class Placement:
    """Where each spec list item came from on the form: spec index -> form row."""

    instance_rows: list[int] = field(default_factory=list)
    server_rows: list[int] = field(default_factory=list)


def _blank_instance() -> dict[str, str]:
    row = {k: "" for k in INSTANCE_TEXT + INSTANCE_INTS}
    row.update(role="prefill", dp_style="external", expert_parallel="", remove="", keep="{}")
    return row


def _s(value: Any) -> str:
    return "" if value is None else str(value)


def node_names(text: str) -> list[str]:
    """The node cell's names: "node2, node3" (commas and/or spaces) -> ["node2", "node3"]."""
    return [name for name in _NODE_SPLIT.split(text.strip()) if name]


# --- spec data -> form --------------------------------------------------------------------------------------

def state_from_spec(data: dict) -> FormState:
    """The form for a stored spec (a revision's spec_to_dict data), plus spare blank rows."""
    model = data.get("model") or {}
    profile = model.get("profile") or {}
    kept_profile: str | dict | None = None
    if isinstance(profile, str):  # a catalog name: its shape shows in the fields, the name rides along
        kept_profile, profile = profile, dict(CATALOG.get(profile, {}))
    elif any(k in profile for k in PROFILE_KEPT):
        kept_profile = {k: profile[k] for k in PROFILE_KEPT if k in profile}
    kv_pool = data.get("kv_pool") or {}
    store = data.get("store") or {}
    proxy = data.get("proxy") or {}
    top = {"launch_profile": _s(data.get("launch_profile", "vllm-ascend")), "run_dir": _s(data.get("run_dir")),
           "model.path": _s(model.get("path")), "model.served_name": _s(model.get("served_name")),
           "model.profile.dtype": _s(profile.get("dtype", "bfloat16")),
           "model.profile.kv_layout": _s(profile.get("kv_layout", "mha")),
           "kv_pool.node": _s(kv_pool.get("node")), "store.replicas": _s(store.get("replicas")),
           "proxy.node": _s(proxy.get("node")), "proxy.port": _s(proxy.get("port")),
           "proxy.policy": _s(proxy.get("policy", "round_robin")), "proxy.hash_key": _s(proxy.get("hash_key")),
           "proxy.workers": _s(proxy.get("workers", "auto")),
           "bench_client.node": _s((data.get("bench_client") or {}).get("node"))}
    top.update({f"model.profile.{k}": _s(profile.get(k)) for k in PROFILE_INTS})
    top.update({f"kv_pool.{k}": _s(kv_pool.get(k)) for k in KV_POOL_TEXT + KV_POOL_INTS})
    top["kv_pool.backend"] = top["kv_pool.backend"] or "mooncake"
    top.update({f"kv_pool.{k}": "on" if kv_pool.get(k) else "" for k in KV_POOL_BOOLS})
    keep: dict[str, Any] = {"model_profile": kept_profile} if kept_profile else {}
    for name in ("transfer_ports", "simulation", "kv_connector", "runtime", "container"):
        if data.get(name) is not None:
            keep[name] = data[name]
    if store.get("memory_mb") is not None:
        keep["store"] = {"memory_mb": store["memory_mb"]}
    kept_proxy = {}
    if proxy.get("admin_port") is not None and proxy.get("admin_port") != _plus_one(proxy.get("port")):
        kept_proxy["admin_port"] = proxy["admin_port"]  # the default (port + 1) follows a changed port
    if proxy.get("kv_events") is not None:
        kept_proxy["kv_events"] = proxy["kv_events"]
    if kept_proxy:
        keep["proxy"] = kept_proxy
    kept_pool = {k: kv_pool[k] for k in KV_POOL_KEPT if kv_pool.get(k) is not None}
    if kept_pool:
        keep["kv_pool"] = kept_pool
    state = FormState(top=top, keep=json.dumps(keep))
    for inst in data.get("instances") or []:
        row = _blank_instance()
        row.update({k: _s(inst.get(k)) for k in INSTANCE_TEXT + INSTANCE_INTS})
        if inst.get("nodes"):
            row["node"] = ", ".join(map(str, inst["nodes"]))
        row["expert_parallel"] = "on" if inst.get("expert_parallel") else ""
        row["keep"] = json.dumps({k: inst[k] for k in INSTANCE_KEPT if inst.get(k) not in (None, [], {})})
        state.instances.append(row)
    for server in store.get("servers") or []:
        state.servers.append({"node": _s(server.get("node")), "port": _s(server.get("port")), "remove": ""})
    for _ in range(SPARE_INSTANCE_ROWS):
        state.add_instance_row()
    for _ in range(SPARE_SERVER_ROWS):
        state.add_server_row()
    return state


# --- POST -> form -------------------------------------------------------------------------------------------

def state_from_post(post) -> FormState:
    """The form as submitted (a QueryDict or dict of strings); rows are found by their field names. A checkbox
    that is not ticked is not submitted, and a disabled field neither: both read as ""."""
    state = FormState(top={k: post.get(k, "") for k in TOP_TEXT + TOP_INTS + TOP_BOOLS}, keep=post.get("keep", "{}"))
    rows: dict[str, dict[int, dict[str, str]]] = {"instances": {}, "store.servers": {}}
    for key in post:
        m = _ROW_KEY.match(key)
        if m:
            rows[m.group(1)].setdefault(int(m.group(2)), {})[m.group(3)] = post.get(key, "")
    for index in sorted(rows["instances"]):
        row = _blank_instance()
        row.update(expert_parallel="", role="", dp_style="")
        row.update({k: v for k, v in rows["instances"][index].items() if k in row})
        state.instances.append(row)
    for index in sorted(rows["store.servers"]):
        got = rows["store.servers"][index]
        state.servers.append({"node": got.get("node", ""), "port": got.get("port", ""),
                              "remove": got.get("remove", "")})
    return state


def is_blank_instance(row: dict[str, str]) -> bool:
    typed = ("name", "node", "engine_id") + INSTANCE_INTS
    return not any(row[k].strip() for k in typed) and row["keep"].strip() in ("", "{}")


def _plus_one(port: Any) -> Any:
    return port + 1 if isinstance(port, int) else None


def kept_fields(text: str, allowed: tuple[str, ...]) -> dict | None:
    """The hidden JSON of fields the form carries unchanged; None if it is not what the form wrote."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return None
    if not isinstance(value, dict) or any(k not in allowed for k in value):
        return None
    return value
