"""The topology as a form: spec data <-> the raw strings of the form editor, and validation problems placed on
the form field they name.

Field names are spec paths (`instances[2].tp`, `proxy.port`) with the form's own row numbers, so a problem's path
only needs its list index translated from the spec (where removed and blank rows are gone) to the form row.
Fields the form does not edit (an instance's devices, extra_args and env; store.memory_mb, transfer_ports, and
proxy.admin_port unless it is the default port + 1) ride along unchanged in hidden JSON, so saving from the form
never drops them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .revision_checks import RevisionInvalid, checked_spec, name_problem
from .services import revision_create
from .topology.spec import DP_STYLES, DTYPE_BYTES, HASH_KEYS, KV_LAYOUTS, LAUNCH_PROFILES, POLICIES, ROLES

INSTANCE_TEXT = ("name", "role", "node", "dp_style")
INSTANCE_INTS = ("tp", "dp", "api_port", "kv_port", "dp_rpc_port", "max_num_seqs", "max_model_len")
INSTANCE_KEPT = ("devices", "extra_args", "env")  # edited in YAML only
KEPT_TOP = ("transfer_ports", "store", "proxy")  # store.memory_mb, proxy.admin_port: edited in YAML only
PROFILE_INTS = ("layers", "kv_heads", "head_dim", "attention_heads")
TOP_TEXT = ("launch_profile", "run_dir", "model.path", "model.served_name", "model.profile.dtype",
            "model.profile.kv_layout", "kv_pool.node", "proxy.node", "proxy.policy", "proxy.hash_key",
            "bench_client.node")
TOP_INTS = tuple(f"model.profile.{k}" for k in PROFILE_INTS) + (
    "kv_pool.rpc_port", "kv_pool.metrics_port", "store.replicas", "proxy.port")
SPARE_INSTANCE_ROWS = 1
SPARE_SERVER_ROWS = 1

_ROW_KEY = re.compile(r"^(instances|store\.servers)\[(\d+)\]\.([a-z_]+)$")
_INT = re.compile(r"^[+-]?\d+$")


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


# --- spec data -> form --------------------------------------------------------------------------------------

def state_from_spec(data: dict) -> FormState:
    """The form for a stored spec (a revision's spec_to_dict data), plus spare blank rows."""
    model = data.get("model") or {}
    profile = model.get("profile") or {}
    kv_pool = data.get("kv_pool") or {}
    store = data.get("store") or {}
    proxy = data.get("proxy") or {}
    top = {"launch_profile": _s(data.get("launch_profile", "vllm-ascend")), "run_dir": _s(data.get("run_dir")),
           "model.path": _s(model.get("path")), "model.served_name": _s(model.get("served_name")),
           "model.profile.dtype": _s(profile.get("dtype", "bfloat16")),
           "model.profile.kv_layout": _s(profile.get("kv_layout", "mha")),
           "kv_pool.node": _s(kv_pool.get("node")), "kv_pool.rpc_port": _s(kv_pool.get("rpc_port")),
           "kv_pool.metrics_port": _s(kv_pool.get("metrics_port")), "store.replicas": _s(store.get("replicas")),
           "proxy.node": _s(proxy.get("node")), "proxy.port": _s(proxy.get("port")),
           "proxy.policy": _s(proxy.get("policy", "round_robin")), "proxy.hash_key": _s(proxy.get("hash_key")),
           "bench_client.node": _s((data.get("bench_client") or {}).get("node"))}
    top.update({f"model.profile.{k}": _s(profile.get(k)) for k in PROFILE_INTS})
    keep = {}
    if data.get("transfer_ports") is not None:
        keep["transfer_ports"] = data["transfer_ports"]
    if store.get("memory_mb") is not None:
        keep["store"] = {"memory_mb": store["memory_mb"]}
    if proxy.get("admin_port") is not None and proxy.get("admin_port") != _plus_one(proxy.get("port")):
        keep["proxy"] = {"admin_port": proxy["admin_port"]}  # the default (port + 1) follows a changed port
    state = FormState(top=top, keep=json.dumps(keep))
    for inst in data.get("instances") or []:
        row = _blank_instance()
        row.update({k: _s(inst.get(k)) for k in INSTANCE_TEXT + INSTANCE_INTS})
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
    """The form as submitted (a QueryDict or dict of strings); rows are found by their field names."""
    state = FormState(top={k: post.get(k, "") for k in TOP_TEXT + TOP_INTS}, keep=post.get("keep", "{}"))
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


# --- form -> spec data --------------------------------------------------------------------------------------

def _is_blank_instance(row: dict[str, str]) -> bool:
    return not any(row[k].strip() for k in ("name", "node") + INSTANCE_INTS) and row["keep"].strip() in ("", "{}")


def state_to_data(state: FormState) -> tuple[dict, list[FormProblem], Placement]:
    """Spec data for spec_from_dict (what the YAML editor would parse for the same values), the typing errors
    that stop it before validation (each on its field), and where each instance and server row went."""
    errors: list[FormProblem] = []
    placement = Placement()
    top = state.top

    def text(name: str) -> str:
        return top.get(name, "").strip()

    def integer(name: str, value: str, label: str) -> int | None:
        value = value.strip()
        if not value:
            return None
        if not _INT.match(value):
            errors.append(FormProblem(name, label, f"expected a whole number, got {value!r}", "type digits only"))
            return None
        return int(value)

    def put(target: dict, key: str, name: str, value: str, label: str) -> None:
        number = integer(name, value, label)
        if number is not None:
            target[key] = number

    profile = {"dtype": text("model.profile.dtype"), "kv_layout": text("model.profile.kv_layout")}
    for k in PROFILE_INTS:
        put(profile, k, f"model.profile.{k}", top.get(f"model.profile.{k}", ""), f"model {k}")
    data: dict[str, Any] = {
        "launch_profile": text("launch_profile"),
        "model": {"path": text("model.path"), "served_name": text("model.served_name"), "profile": profile},
        "instances": []}
    if text("run_dir"):  # blank: the default run dir, named after the deployment
        data["run_dir"] = text("run_dir")

    for index, row in enumerate(state.instances):
        if row.get("remove") or _is_blank_instance(row):
            continue
        who = row["name"].strip() or f"row {index + 1}"
        inst: dict[str, Any] = {k: row[k].strip() for k in INSTANCE_TEXT}
        for k in INSTANCE_INTS:
            put(inst, k, f"instances[{index}].{k}", row[k], f"instance {who} {k}")
        inst["expert_parallel"] = bool(row.get("expert_parallel"))
        kept = _kept(row.get("keep", ""), INSTANCE_KEPT)
        if kept is None:
            errors.append(FormProblem(f"instances[{index}].keep", f"instance {who}",
                                      "its devices, extra_args and env could not be read back",
                                      "reload the form, or edit them in YAML"))
        else:
            inst.update(kept)
        placement.instance_rows.append(index)
        data["instances"].append(inst)

    kept_top = _kept(state.keep, KEPT_TOP) or {}
    if text("kv_pool.node"):
        kv_pool = {"node": text("kv_pool.node")}
        put(kv_pool, "rpc_port", "kv_pool.rpc_port", top.get("kv_pool.rpc_port", ""), "kv_pool rpc_port")
        put(kv_pool, "metrics_port", "kv_pool.metrics_port", top.get("kv_pool.metrics_port", ""),
            "kv_pool metrics_port")
        data["kv_pool"] = kv_pool
    servers = []
    for index, server in enumerate(state.servers):
        if server.get("remove") or not (server["node"].strip() or server["port"].strip()):
            continue
        item: dict[str, Any] = {"node": server["node"].strip()}
        put(item, "port", f"store.servers[{index}].port", server["port"], f"store server {index + 1} port")
        placement.server_rows.append(index)
        servers.append(item)
    if servers:
        store: dict[str, Any] = {"servers": servers}
        put(store, "replicas", "store.replicas", top.get("store.replicas", ""), "store replicas")
        memory = (kept_top.get("store") or {}).get("memory_mb") if isinstance(kept_top.get("store"), dict) else None
        if memory is not None:
            store["memory_mb"] = memory
        data["store"] = store
    proxy: dict[str, Any] = {"node": text("proxy.node"), "policy": text("proxy.policy")}
    put(proxy, "port", "proxy.port", top.get("proxy.port", ""), "proxy port")
    if text("proxy.hash_key"):
        proxy["hash_key"] = text("proxy.hash_key")
    kept_proxy = kept_top.get("proxy")
    if isinstance(kept_proxy, dict) and kept_proxy.get("admin_port") is not None:
        proxy["admin_port"] = kept_proxy["admin_port"]
    data["proxy"] = proxy
    if text("bench_client.node"):
        data["bench_client"] = {"node": text("bench_client.node")}
    if kept_top.get("transfer_ports") is not None:
        data["transfer_ports"] = kept_top["transfer_ports"]
    return data, errors, placement


def _plus_one(port: Any) -> Any:
    return port + 1 if isinstance(port, int) else None


def _kept(text: str, allowed: tuple[str, ...]) -> dict | None:
    """The hidden JSON of fields the form carries unchanged; None if it is not what the form wrote."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return None
    if not isinstance(value, dict) or any(k not in allowed for k in value):
        return None
    return value


# --- problems -> fields -------------------------------------------------------------------------------------

_SPEC_ROW = re.compile(r"^(instances|store\.servers)\[(\d+)\](?:\.([a-z_]+))?")


def field_of(path: str, placement: Placement) -> str:
    """The form field a spec path belongs to: instances[2].tp -> instances[<its form row>].tp; a kept field
    (devices, extra_args[3], env.X) -> that row's read-only cell; a path the form has no field for -> ""."""
    m = _SPEC_ROW.match(path)
    if m:
        rows = placement.instance_rows if m.group(1) == "instances" else placement.server_rows
        index = int(m.group(2))
        if index >= len(rows):
            return m.group(1)
        row, name = rows[index], m.group(3)
        if not name:
            return f"{m.group(1)}[{row}]"
        if m.group(1) == "instances" and name in INSTANCE_KEPT:
            name = "keep"
        return f"{m.group(1)}[{row}].{name}"
    if path.startswith(("transfer_ports", "store.memory_mb", "proxy.admin_port")):
        return "keep"
    if path in TOP_TEXT + TOP_INTS or path in ("instances", "store.servers"):
        return path
    if path in ("model.profile", "model"):
        return "model.path"
    if path in ("kv_pool", "proxy", "store", "bench_client"):
        return {"kv_pool": "kv_pool.node", "proxy": "proxy.node", "store": "store.servers",
                "bench_client": "bench_client.node"}[path]
    return ""


# --- form -> what the template shows ------------------------------------------------------------------------

@dataclass
class Field:
    name: str
    value: str
    kind: str = "text"  # text | number | select | checkbox
    choices: list[tuple[str, str]] = field(default_factory=list)
    problems: list[FormProblem] = field(default_factory=list)
    label: str = ""

    @property
    def html_id(self) -> str:
        return "f-" + re.sub(r"[^A-Za-z0-9]+", "-", self.name).strip("-")


def _choices(options, current: str, *, blank: str | None = None) -> list[tuple[str, str]]:
    out = [("", blank)] if blank is not None else []
    out += [(o, o) for o in options]
    if current and current not in options:
        out.append((current, f"{current} (not offered here)"))
    return out


def form_context(state: FormState, problems: list[FormProblem], *, npu_nodes: list[str],
                 all_nodes: list[str]) -> dict:
    """Fields grouped as the template lays them out, each with the problems placed on it; problems whose field
    is not on the page come back in `unplaced`."""
    by_field: dict[str, list[FormProblem]] = {}
    for p in problems:
        by_field.setdefault(p.field, []).append(p)
    placed: set[str] = set()

    def f(name: str, value: str, kind: str = "text", choices=None, label: str = "") -> Field:
        placed.add(name)
        return Field(name, value, kind, choices or [], by_field.get(name, []), label or name.rsplit(".", 1)[-1])

    top = state.top
    t = {name: f(name, top.get(name, ""), "number" if name in TOP_INTS else "text") for name in TOP_TEXT + TOP_INTS}
    t["launch_profile"] = f("launch_profile", top.get("launch_profile", ""), "select",
                            _choices(LAUNCH_PROFILES, top.get("launch_profile", "")))
    t["model.profile.dtype"] = f("model.profile.dtype", top.get("model.profile.dtype", ""), "select",
                                 _choices(tuple(DTYPE_BYTES), top.get("model.profile.dtype", "")))
    t["model.profile.kv_layout"] = f("model.profile.kv_layout", top.get("model.profile.kv_layout", ""), "select",
                                     _choices(KV_LAYOUTS, top.get("model.profile.kv_layout", "")))
    for name, blank in (("kv_pool.node", "— no KV pool —"), ("proxy.node", "— choose —"),
                        ("bench_client.node", "— no bench client —")):
        t[name] = f(name, top.get(name, ""), "select", _choices(all_nodes, top.get(name, ""), blank=blank))
    t["proxy.policy"] = f("proxy.policy", top.get("proxy.policy", ""), "select",
                          _choices(POLICIES, top.get("proxy.policy", "")))
    t["proxy.hash_key"] = f("proxy.hash_key", top.get("proxy.hash_key", ""), "select",
                            _choices(HASH_KEYS, top.get("proxy.hash_key", ""), blank="— none —"))
    t = {name.replace(".", "_"): value for name, value in t.items()}

    instances = []
    for index, row in enumerate(state.instances):
        p = f"instances[{index}]"
        cells = {k: f(f"{p}.{k}", row.get(k, ""), "number") for k in INSTANCE_INTS}
        cells["name"] = f(f"{p}.name", row.get("name", ""))
        cells["role"] = f(f"{p}.role", row.get("role", ""), "select", _choices(ROLES, row.get("role", "")))
        cells["node"] = f(f"{p}.node", row.get("node", ""), "select",
                          _choices(npu_nodes, row.get("node", ""), blank="—"))
        cells["dp_style"] = f(f"{p}.dp_style", row.get("dp_style", ""), "select",
                              _choices(DP_STYLES, row.get("dp_style", "")))
        cells["expert_parallel"] = f(f"{p}.expert_parallel", row.get("expert_parallel", ""), "checkbox")
        cells["remove"] = f(f"{p}.remove", row.get("remove", ""), "checkbox")
        cells["keep"] = f(f"{p}.keep", row.get("keep", "{}"))
        kept = _kept(row.get("keep", ""), INSTANCE_KEPT) or {}
        instances.append({"f": cells, "index": index, "kept": _kept_lines(kept), "kept_keys": ", ".join(kept),
                          "problems": by_field.get(p, []), "spare": _is_blank_instance(row)})
        placed.add(p)
    servers = []
    for index, server in enumerate(state.servers):
        p = f"store.servers[{index}]"
        servers.append({"index": index, "problems": by_field.get(p, []), "f": {
            "node": f(f"{p}.node", server.get("node", ""), "select",
                      _choices(all_nodes, server.get("node", ""), blank="—")),
            "port": f(f"{p}.port", server.get("port", ""), "number"),
            "remove": f(f"{p}.remove", server.get("remove", ""), "checkbox")}})
        placed.add(p)
    kept_top = _kept(state.keep, KEPT_TOP) or {}
    return {"top": t, "instances": instances, "servers": servers, "keep": state.keep,
            "kept_top": _kept_lines(kept_top), "keep_problems": by_field.get("keep", []),
            "instances_problems": by_field.get("instances", []),
            "servers_problems": by_field.get("store.servers", []),
            "unplaced": [p for p in problems if p.field not in placed | {"keep", "instances", "store.servers"}]}


def _kept_lines(kept: dict) -> list[str]:
    out = []
    for key, value in kept.items():
        if key == "env" and isinstance(value, dict):
            out += [f"env {k}={v}" for k, v in value.items()]
        elif key == "extra_args" and isinstance(value, list):
            out.append("extra_args " + " ".join(map(str, value)))
        else:
            out.append(f"{key}: {json.dumps(value)}")
    return out


def placed_problems(problems, data: dict, placement: Placement) -> list[FormProblem]:
    """Validation Problems (spec paths) as FormProblems on the form fields they name."""
    out = []
    for problem in problems:
        named = name_problem(problem, data)
        label = named.path
        if named.instance:
            label = f"instance {named.instance}" + (f".{named.field}" if named.field else "")
        out.append(FormProblem(field_of(problem.path, placement), label, problem.message, problem.suggestion))
    return out


def spec_form_save(*, deployment, user, state: FormState, comment: str = "", activate: bool = False):
    """(the new revision, []) or (None, every problem on its field). A field that is not a number stops the save,
    but the rest is still checked so the operator sees all it can at once (the topology rules need every
    required number, so they only run when those read)."""
    data, problems, placement = state_to_data(state)
    try:
        if problems:
            checked_spec(cluster=deployment.cluster, deployment_id=deployment.pk, deployment_name=deployment.name,
                         data=data)
            return None, problems
        return revision_create(deployment=deployment, user=user, data=data, comment=comment,
                               activate=activate), []
    except RevisionInvalid as exc:
        typed = {p.field for p in problems}  # a typing error explains its field better than "missing"
        return None, problems + [p for p in placed_problems(exc.problems, data, placement) if p.field not in typed]
