"""Form -> spec data for spec_from_dict: what the YAML editor would parse for the same values, the typing errors
that stop it before validation (each on its field), and where each instance and server row went."""

from __future__ import annotations

import re
from typing import Any

from ..topology.model_catalog import CATALOG
from .state import (
    INSTANCE_INTS,
    INSTANCE_KEPT,
    INSTANCE_TEXT,
    KEPT_TOP,
    KV_POOL_BOOLS,
    KV_POOL_INTS,
    KV_POOL_KEPT,
    KV_POOL_TEXT,
    PROFILE_INTS,
    PROFILE_KEPT,
    FormProblem,
    FormState,
    Placement,
    is_blank_instance,
    kept_fields,
    node_names,
)

_INT = re.compile(r"^[+-]?\d+$")


class _Reader:
    """Reads the form's strings into spec values; a field that is not a whole number becomes a FormProblem."""

    def __init__(self, top: dict[str, str]):
        self.top = top
        self.errors: list[FormProblem] = []

    def text(self, name: str) -> str:
        return self.top.get(name, "").strip()

    def put(self, target: dict, key: str, name: str, label: str, value: str | None = None) -> None:
        """target[key] = the whole number in form field `name` (or in `value`); nothing when blank."""
        value = (self.top.get(name, "") if value is None else value).strip()
        if not value:
            return
        if not _INT.match(value):
            self.errors.append(FormProblem(name, label, f"expected a whole number, got {value!r}",
                                           "type digits only"))
            return
        target[key] = int(value)


def state_to_data(state: FormState) -> tuple[dict, list[FormProblem], Placement]:
    read, placement = _Reader(state.top), Placement()
    profile = {"dtype": read.text("model.profile.dtype"), "kv_layout": read.text("model.profile.kv_layout")}
    for k in PROFILE_INTS:
        read.put(profile, k, f"model.profile.{k}", f"model {k}")
    kept_top = kept_fields(state.keep, KEPT_TOP) or {}
    data: dict[str, Any] = {
        "launch_profile": read.text("launch_profile"),
        "model": {"path": read.text("model.path"), "served_name": read.text("model.served_name"),
                  "profile": _profile(profile, kept_top.get("model_profile"))},
        "instances": _instances(read, state.instances, placement)}
    if read.text("run_dir"):  # blank: the default run dir, named after the deployment
        data["run_dir"] = read.text("run_dir")
    if read.text("kv_pool.node"):
        data["kv_pool"] = _kv_pool(read, kept_top)
    store = _store(read, state.servers, placement, kept_top)
    if store:
        data["store"] = store
    data["proxy"] = _proxy(read, kept_top)
    if read.text("bench_client.node"):
        data["bench_client"] = {"node": read.text("bench_client.node")}
    for name in ("transfer_ports", "simulation", "kv_connector", "runtime", "container"):
        if kept_top.get(name) is not None:
            data[name] = kept_top[name]
    return data, read.errors, placement


def _profile(shown: dict, kept: Any) -> str | dict:
    """A catalog profile stays its name while the form shows its shape unchanged; edited, it becomes the mapping
    with the catalog's sizes. A spelt-out profile gets its sizes back."""
    if isinstance(kept, str) and kept in CATALOG:
        entry = CATALOG[kept]
        if all(entry.get(k) == v for k, v in shown.items()) and all(k in shown for k in PROFILE_INTS):
            return kept
        return {**shown, **{k: entry[k] for k in PROFILE_KEPT if k in entry}}
    if isinstance(kept, dict):
        return {**shown, **{k: v for k, v in kept.items() if k in PROFILE_KEPT}}
    return shown


def _instances(read: _Reader, rows: list[dict[str, str]], placement: Placement) -> list[dict]:
    out = []
    for index, row in enumerate(rows):
        if row.get("remove") or is_blank_instance(row):
            continue
        who = row["name"].strip() or f"row {index + 1}"
        inst: dict[str, Any] = {k: row[k].strip() for k in INSTANCE_TEXT if k not in ("node", "engine_id")}
        nodes = node_names(row["node"])
        if len(nodes) > 1:
            inst["nodes"] = nodes
        else:  # one node (or none: the parser says node is missing, on this cell)
            inst["node"] = nodes[0] if nodes else ""
        if row["engine_id"].strip():
            inst["engine_id"] = row["engine_id"].strip()
        for k in INSTANCE_INTS:
            read.put(inst, k, f"instances[{index}].{k}", f"instance {who} {k}", row[k])
        inst["expert_parallel"] = bool(row.get("expert_parallel"))
        kept = kept_fields(row.get("keep", ""), INSTANCE_KEPT)
        if kept is None:
            read.errors.append(FormProblem(f"instances[{index}].keep", f"instance {who}",
                                           f"its {', '.join(INSTANCE_KEPT)} could not be read back",
                                           "reload the form, or edit them in YAML"))
        else:
            inst.update(kept)
        placement.instance_rows.append(index)
        out.append(inst)
    return out


def _kv_pool(read: _Reader, kept_top: dict) -> dict:
    """Blank fields are left out, so the parser's defaults apply (a backend's own ports among them)."""
    kv_pool: dict[str, Any] = {"node": read.text("kv_pool.node")}
    for k in KV_POOL_TEXT:
        if read.text(f"kv_pool.{k}"):
            kv_pool[k] = read.text(f"kv_pool.{k}")
    for k in KV_POOL_INTS:
        read.put(kv_pool, k, f"kv_pool.{k}", f"kv_pool {k}")
    for k in KV_POOL_BOOLS:
        if read.text(f"kv_pool.{k}"):
            kv_pool[k] = True
    kept = kept_top.get("kv_pool")
    if isinstance(kept, dict):
        kv_pool.update({k: v for k, v in kept.items() if k in KV_POOL_KEPT})
    return kv_pool


def _store(read: _Reader, rows: list[dict[str, str]], placement: Placement, kept_top: dict) -> dict | None:
    servers = []
    for index, server in enumerate(rows):
        if server.get("remove") or not (server["node"].strip() or server["port"].strip()):
            continue
        item: dict[str, Any] = {"node": server["node"].strip()}
        read.put(item, "port", f"store.servers[{index}].port", f"store server {index + 1} port", server["port"])
        placement.server_rows.append(index)
        servers.append(item)
    if not servers:
        return None
    store: dict[str, Any] = {"servers": servers}
    read.put(store, "replicas", "store.replicas", "store replicas")
    memory = (kept_top.get("store") or {}).get("memory_mb") if isinstance(kept_top.get("store"), dict) else None
    if memory is not None:
        store["memory_mb"] = memory
    return store


def _proxy(read: _Reader, kept_top: dict) -> dict:
    proxy: dict[str, Any] = {"node": read.text("proxy.node"), "policy": read.text("proxy.policy")}
    read.put(proxy, "port", "proxy.port", "proxy port")
    if read.text("proxy.hash_key"):
        proxy["hash_key"] = read.text("proxy.hash_key")
    workers = read.text("proxy.workers")
    if workers and workers != "auto":  # else the default, auto; anything else the spec parser names
        proxy["workers"] = int(workers) if _INT.match(workers) else workers
    kept_proxy = kept_top.get("proxy")
    if isinstance(kept_proxy, dict):
        for key in ("admin_port", "kv_events"):  # edited in YAML only
            if kept_proxy.get(key) is not None:
                proxy[key] = kept_proxy[key]
    return proxy
