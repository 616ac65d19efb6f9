"""`--kv-transfer-config` as vLLM + vllm-ascend read it: validation, connector lookup, MultiConnector children.

Two stages, as in the real engine:
1. `validate_top(value)` is the argparse type of `--kv-transfer-config`: vLLM validates the JSON into its
   KVTransferConfig with pydantic (`TypeAdapter(KVTransferConfig).validate_json`, vllm/engine/arg_utils.py) and a
   failure is an argparse error (exit 2) carrying pydantic's message. Checked here: JSON, an object, `kv_role`
   and `kv_load_failure_policy` literals, `kv_port` an integer, `kv_connector_extra_config` an object, and
   KVTransferConfig.__post_init__'s "Please specify kv_disagg_role when kv_connector is set". Unknown keys are
   ignored, as pydantic dataclasses do.
2. `plan(config)` is the engine start: KVConnectorFactory resolves the name (`ValueError: Unsupported connector
   type: X` for a name nobody registered), MultiConnector asserts `connectors` and builds one KVTransferConfig per
   child (a bad child fails with the pydantic message, now at start, exit 1), AscendStoreConnector picks its
   backend (`ValueError: Unsupported KV pool backend: X`, vllm_ascend/.../ascend_store/pool_scheduler.py).

Simulated connectors: MooncakeConnectorV1 and MooncakeLayerwiseConnector (PD transfer, engine/kvwire.py),
AscendStoreConnector and its alias MooncakeConnectorStoreV1 (the KV pool, engine/prefix.py), MultiConnector.
A connector vLLM or vllm-ascend registers but the simulator does not play stops the engine with a message
saying so (not vLLM's words: a real engine would load it).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

log = logging.getLogger("simcluster.engine")

ROLES = ("kv_producer", "kv_consumer", "kv_both")
POLICIES = ("recompute", "fail")
P2P = ("MooncakeConnectorV1", "MooncakeLayerwiseConnector")
STORE = ("AscendStoreConnector", "MooncakeConnectorStoreV1")
SIMULATED = (*P2P, *STORE, "MultiConnector")
# Registered by vllm-ascend (vllm_ascend/distributed/kv_transfer/__init__.py) or upstream vLLM's
# KVConnectorFactory, but not simulated.
REGISTERED_ELSEWHERE = (
    "MooncakeHybridConnector", "UCMConnector", "OffloadingConnector", "SimpleCPUOffloadConnector",
    "RecomputeCPUOffloadConnector", "SfaRemoteD2HConnector", "ExampleConnector", "ExampleHiddenStatesConnector",
    "SharedStorageConnector", "P2pNcclConnector", "LMCacheConnectorV1", "LMCacheMPConnector", "NixlConnector",
    "NixlPullConnector", "NixlPushConnector", "MoRIIOConnector", "DecodeBenchConnector", "MooncakeStoreConnector",
    "FlexKVConnectorV1", "HF3FSKVConnector",
)
BACKENDS = ("mooncake", "memcache", "yuanrong")  # vllm_ascend/.../ascend_store/backend/__init__.py backend_map
DEFAULT_KV_PORT = 14579  # vllm/config/kv_transfer.py


class KVConfigError(Exception):
    """The engine's last words for a connector config a real engine refuses too (printed, exit 1)."""


@dataclass(frozen=True)
class StorePlan:
    """One AscendStoreConnector."""
    connector: str
    kv_role: str
    backend: str  # mooncake | memcache
    lookup_rpc_port: str
    consumer_is_to_load: bool
    consumer_is_to_put: bool
    use_layerwise: bool

    @property
    def loads(self) -> bool:
        """Looks prefix blocks up in the pool before computing (pool_scheduler.get_num_new_matched_tokens)."""
        return self.kv_role != "kv_consumer" or self.consumer_is_to_load

    @property
    def puts(self) -> bool:
        """Saves computed blocks to the pool (a consumer only with consumer_is_to_put)."""
        return self.kv_role != "kv_consumer" or self.consumer_is_to_put


@dataclass(frozen=True)
class ConnectorPlan:
    kv_role: str | None  # the P2P connector's role; without one, the top-level role
    kv_connector: str | None  # the P2P connector (MooncakeConnectorV1 | MooncakeLayerwiseConnector) or None
    kv_port: int | None
    engine_id: str | None
    kv_load_failure_policy: str
    p2p_extra: dict
    store: StorePlan | None


# -- stage 1: pydantic's view of one KVTransferConfig -------------------------------------------------------

def _describe(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:30] + "..." + text[-25:]


def _error_line(loc: str, message: str, kind: str, value) -> list[str]:
    head = [loc] if loc else []
    return head + [f"  {message} [type={kind}, input_value={_describe(value)}, "
                   f"input_type={type(value).__name__}]"]


def validation_errors(data) -> list[str]:
    """pydantic's lines for a dict validated into vLLM's KVTransferConfig; [] when it is valid."""
    if not isinstance(data, dict):
        return _error_line("", "Input should be a dictionary or an instance of KVTransferConfig", "dataclass_type",
                           data)
    lines: list[str] = []
    for key in ("kv_connector", "engine_id", "kv_connector_module_path", "kv_ip", "kv_buffer_device"):
        value = data.get(key)
        if key in data and value is not None and not isinstance(value, str):
            lines += _error_line(key, "Input should be a valid string", "string_type", value)
    role = data.get("kv_role")
    if role is not None and role not in ROLES:
        lines += _error_line("kv_role", "Input should be 'kv_producer', 'kv_consumer' or 'kv_both'", "literal_error",
                             role)
    if "kv_load_failure_policy" in data and data["kv_load_failure_policy"] not in POLICIES:
        lines += _error_line("kv_load_failure_policy", "Input should be 'recompute' or 'fail'", "literal_error",
                             data["kv_load_failure_policy"])
    for key in ("kv_port", "kv_rank", "kv_parallel_size"):
        if key in data and not (key == "kv_rank" and data[key] is None) and _as_int(data[key]) is None:
            lines += _error_line(key, "Input should be a valid integer, unable to parse string as an integer"
                                 if isinstance(data[key], str) else "Input should be a valid integer", "int_parsing"
                                 if isinstance(data[key], str) else "int_type", data[key])
    if "kv_connector_extra_config" in data and not isinstance(data["kv_connector_extra_config"], dict):
        lines += _error_line("kv_connector_extra_config", "Input should be a valid dictionary", "dict_type",
                             data["kv_connector_extra_config"])
    if not lines and data.get("kv_connector") is not None and role is None:
        lines += _error_line("", f"Value error, Please specify kv_disagg_role when kv_connector is set, supported "
                                 f"roles are {ROLES}", "value_error", data)
    return lines


def _as_int(value) -> int | None:
    """pydantic's lax int: ints (not bools), integral floats, strings of an integer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def pydantic_message(lines: list[str], errors: int) -> str:
    return f"{errors} validation error{'s' if errors != 1 else ''} for KVTransferConfig\n" + "\n".join(lines)


def _count(lines: list[str]) -> int:
    return sum(1 for line in lines if line.startswith("  "))


def validate_top(text: str) -> dict:
    """The argparse type of --kv-transfer-config; ValueError carries pydantic's message."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(pydantic_message(_error_line("", f"Invalid JSON: {exc}", "json_invalid", text), 1)) from None
    lines = validation_errors(data)
    if lines:
        raise ValueError(pydantic_message(lines, _count(lines)))
    return data


# -- stage 2: what the engine builds at start ------------------------------------------------------------

def _connector_class(name: str | None, module_path: str | None) -> str:
    if name in SIMULATED:
        return name
    if name == "MooncakeConnector":
        raise KVConfigError("simcluster: MooncakeConnector resolves to upstream vLLM's GPU connector on vllm-ascend "
                            "(VA commit 073a3a6e6c); use MooncakeConnectorV1")
    if name in REGISTERED_ELSEWHERE or module_path:
        raise KVConfigError(f"simcluster: kv_connector {name!r} is registered in vLLM/vllm-ascend but not simulated "
                            f"(simulated: {', '.join(SIMULATED)})")
    raise KVConfigError(f"ValueError: Unsupported connector type: {name}")


def _truthy(extra: dict, key: str) -> bool:
    value = extra.get(key, False)
    if not isinstance(value, bool):
        # vllm-ascend reads these with .get(key, False) and uses them as truth values: "false" counts as true.
        log.warning("kv_connector_extra_config.%s=%r is not a JSON boolean; vllm-ascend takes it as %s", key, value,
                    bool(value))
    return bool(value)


def _store(child: dict) -> StorePlan:
    extra = child.get("kv_connector_extra_config") or {}
    backend = extra.get("backend", "mooncake")
    name = backend.lower() if isinstance(backend, str) else backend
    if name not in BACKENDS:
        raise KVConfigError(f"ValueError: Unsupported KV pool backend: {backend}")
    if name == "yuanrong":
        raise KVConfigError("simcluster: the yuanrong backend (openYuanrong datasystem) is not available on the "
                            "simulated cluster; use mooncake or memcache")
    if "lookup_rpc_port" in extra:
        port = extra["lookup_rpc_port"]
    elif "mooncake_rpc_port" in extra:
        port = extra["mooncake_rpc_port"]
        log.warning("It is recommended to use the lookup_rpc_port, as the mooncake_rpc_port will be removed in the "
                    "future.")
    else:
        port = 0  # get_zmq_rpc_path_lookup's default: two instances on a node without one collide
    if child["kv_connector"] == "MooncakeConnectorStoreV1":
        log.warning("It is recommended to use the AscendStoreConnector, as the MoonCakeStoreConnector will be "
                    "removed in the future.")
    return StorePlan(connector=child["kv_connector"], kv_role=child["kv_role"], backend=name,
                     lookup_rpc_port=str(port), consumer_is_to_load=_truthy(extra, "consumer_is_to_load"),
                     consumer_is_to_put=_truthy(extra, "consumer_is_to_put"),
                     use_layerwise=_truthy(extra, "use_layerwise"))


def _children(top: dict) -> list[dict]:
    extra = top.get("kv_connector_extra_config") or {}
    children = extra.get("connectors")
    if children is None:
        raise KVConfigError("AssertionError")  # multi_connector.py: `assert ktcs is not None`
    if not isinstance(children, list):
        children = list(children) if isinstance(children, (dict, str)) else [children]
    out = []
    for child in children:
        if not isinstance(child, dict):
            raise KVConfigError(f"TypeError: vllm.config.kv_transfer.KVTransferConfig() argument after ** must be "
                                f"a mapping, not {type(child).__name__}")
        child = {**child, "engine_id": child.get("engine_id", top.get("engine_id"))}
        lines = validation_errors(child)
        if lines:
            raise KVConfigError("pydantic_core._pydantic_core.ValidationError: " + pydantic_message(lines, _count(lines)))
        name = _connector_class(child.get("kv_connector"), child.get("kv_connector_module_path"))
        if name == "MultiConnector":
            raise KVConfigError("simcluster: a MultiConnector inside a MultiConnector is not simulated")
        out.append({**child, "kv_connector": name})
    return out


def plan(top: dict | None) -> ConnectorPlan:
    """What the engine runs for a validated top-level config (None or {}: no connector)."""
    top = top or {}
    policy = top.get("kv_load_failure_policy", "fail")
    if top.get("kv_connector") is None:
        return ConnectorPlan(None, None, None, top.get("engine_id"), policy, {}, None)
    name = _connector_class(top["kv_connector"], top.get("kv_connector_module_path"))
    connectors = _children(top) if name == "MultiConnector" else [top]
    p2p = [c for c in connectors if c["kv_connector"] in P2P]
    stores = [c for c in connectors if c["kv_connector"] in STORE]
    if len(p2p) > 1 or len(stores) > 1:
        raise KVConfigError("simcluster: more than one P2P connector or more than one AscendStoreConnector in a "
                            "MultiConnector is not simulated")
    store = _store(stores[0]) if stores else None
    if not p2p:
        return ConnectorPlan(top["kv_role"], None, None, top.get("engine_id"), policy, {}, store)
    child = p2p[0]
    extra = child.get("kv_connector_extra_config") or {}
    if child["kv_role"] in ("kv_producer", "kv_consumer") and not {"prefill", "decode"} <= set(extra):
        # vllm_ascend/.../kv_p2p/mooncake_connector.py _get_prefill_decode_size
        raise KVConfigError("AssertionError: kv_connector_extra_config needs prefill and decode dp_size/tp_size")
    port = _as_int(child["kv_port"]) if "kv_port" in child else DEFAULT_KV_PORT
    return ConnectorPlan(child["kv_role"], child["kv_connector"], port, child.get("engine_id"), policy, extra, store)
