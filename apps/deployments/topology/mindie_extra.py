"""What `mindie.extra` may add to user_config.json (docs/mindie.md §2): listed tuning keys with plain values, nothing
else. Every other key is refused, so no topology can name a plugin, a file, an address, a TLS setting or anything
else MindIE would load or trust; a field the topology renders (RENDERED, mindie_config.py) is refused with the
advice to change the topology field it comes from.

A key's kind: INT (a whole number from 0), NUMBER (a number from 0), BOOL, or a tuple of the words it may be."""

from __future__ import annotations

from collections.abc import Mapping

from plainyaml import short_repr

from .profiles.mindie_config import RENDERED

INT, NUMBER, BOOL = "a whole number from 0", "a number from 0", "true or false"
MAX_INT = 10**12

_SERVER = {
    "ServerConfig": {"maxLinkNum": INT, "timeoutInSeconds": INT, "tokenTimeout": INT, "e2eTimeout": INT},
    "BackendConfig": {
        "tokenizerProcessNumber": INT,
        "ModelDeployConfig": {
            "truncation": BOOL,
            # a list of one model, as rendered: its first item's keys
            "ModelConfig": [{"kv_trans_timeout": INT, "kv_link_timeout": INT, "cpuMemSize": INT, "npuMemSize": INT,
                             "backendType": ("atb", "ms"), "trustRemoteCode": BOOL,
                             "async_scheduler_wait_time": NUMBER}],
        },
        "ScheduleConfig": {"templateType": ("Standard", "Mix"), "cacheBlockSize": INT, "prefillTimeMsPerReq": INT,
                           "prefillPolicyType": INT, "decodeTimeMsPerReq": INT, "decodePolicyType": INT,
                           "maxPreemptCount": INT, "supportSelectBatch": BOOL, "maxQueueDelayMicroseconds": INT},
    },
}
ALLOWED = {
    "mindie_ms_controller_config": {"digs_prefill_slo": NUMBER, "digs_decode_slo": NUMBER, "default_p_rate": INT,
                                    "default_d_rate": INT},
    "mindie_ms_coordinator_config": {
        "http_config": {"server_thread_num": INT, "client_thread_num": INT, "http_timeout_seconds": INT,
                        "keep_alive_seconds": INT},
        "request_limit": {"single_node_max_requests": INT, "max_requests": INT, "body_limit": INT},
        "exception_config": {"max_retry": INT, "schedule_timeout": INT, "first_token_timeout": INT,
                             "infer_timeout": INT, "tokenizer_timeout": INT},
    },
    "mindie_server_prefill_config": _SERVER,
    "mindie_server_decode_config": _SERVER,
}
TRUST_REMOTE_CODE = "trustRemoteCode"


NOT_LISTED = "not a key mindie.extra may set"
IS_RENDERED = "is rendered from the topology"


def extra_problems(extra: Mapping, allowed=ALLOWED, rendered=RENDERED, prefix: str = "") -> list[tuple[str, str]]:
    """(path, why) for each key of `extra` that is rendered (`rendered`: RENDERED's tree, leaves None), not listed in
    `allowed`, or whose value is not of its kind."""
    out = []
    for key, value in extra.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        kind = allowed.get(key) if isinstance(allowed, Mapping) else None
        shape = rendered.get(key, ...) if isinstance(rendered, Mapping) else ...
        if shape is None:
            out.append((path, f"{path} {IS_RENDERED}"))
        elif isinstance(kind, list) or isinstance(shape, list):
            if isinstance(value, list) and len(value) == 1 and isinstance(value[0], Mapping):
                out += extra_problems(value[0], _item(kind), _item(shape), f"{path}[0]")
            else:
                out.append((path, "expected a list of one object (the model's settings)"))
        elif isinstance(kind, Mapping) or isinstance(shape, Mapping):
            if isinstance(value, Mapping):
                out += extra_problems(value, kind if isinstance(kind, Mapping) else {},
                                      shape if isinstance(shape, Mapping) else {}, path)
            else:
                out.append((path, "expected an object"))
        elif kind is None:
            out.append((path, NOT_LISTED))
        elif not plain_value_of(kind, value):
            wanted = f"one of {', '.join(kind)}" if isinstance(kind, tuple) else kind
            out.append((path, f"expected {wanted}, got {short_repr(value)}"))
    return out


def _item(tree):
    return tree[0] if isinstance(tree, list) and tree else {}


def plain_value_of(kind, value) -> bool:
    if isinstance(kind, tuple):
        return isinstance(value, str) and value in kind
    if kind == BOOL:
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value > MAX_INT:
        return False
    return kind == NUMBER or isinstance(value, int)


def trusts_remote_code(extra: Mapping) -> list[str]:
    """Paths in extra that set trustRemoteCode: true (the model's own Python runs in the pods)."""
    out = []
    for role in ("prefill", "decode"):
        server = extra.get(f"mindie_server_{role}_config")
        try:
            model = server["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(model, Mapping) and model.get(TRUST_REMOTE_CODE) is True:
            out.append(f"mindie_server_{role}_config.BackendConfig.ModelDeployConfig.ModelConfig[0].{TRUST_REMOTE_CODE}")
    return out

