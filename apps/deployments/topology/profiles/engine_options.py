"""What an operator may add to an engine's command line and environment: named allowlists, never a denylist.

A flag or env name is here only if no value of it can make the node run another program or load other code. Left
out on purpose: anything naming a program, library, interpreter option or import path (LD_*, PATH, PYTHON*,
BROWSER, EDITOR, PAGER, SHELL, HOME, HF_* caches and endpoints, VLLM_PLUGINS, VLLM_LOGGING_CONFIG_PATH whose
dictConfig can build any class, ASCEND_*_OPP_PATH custom operators), and engine flags that take a class, module,
plugin, file or second model (--worker-cls, --worker-extension-cls, --tokenizer, --chat-template,
--tool-parser-plugin, --hf-overrides, --load-format...). JSON-valued flags take only the keys listed, with
scalar values whose strings are plain words (compilation-config's inductor_passes names functions to import;
speculative-config's model is a second model to load).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

_INT = re.compile(r"^-?\d+$")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_WORD = re.compile(r"^[A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class FlagRule:
    kind: str  # switch | int | number | choice | name | json
    choices: tuple[str, ...] = ()  # choice: the values; json: the allowed top-level keys

    @property
    def example(self) -> tuple[str, ...]:
        """A valid value list for this flag (tests feed every allowed flag to the simulated engine)."""
        return {"switch": (), "int": ("1",), "number": ("0.5",), "name": ("qwen3",), "json": ("{}",)}.get(
            self.kind, self.choices[:1])

    def value_problem(self, flag: str, value: str | None) -> str | None:
        """Why `value` (None: no value follows) is not acceptable for this flag, or None."""
        if self.kind == "switch":
            return None if value is None else f"{flag} takes no value"
        if value is None:
            return f"{flag} needs a value"
        if self.kind == "int" and not _INT.match(value):
            return f"{flag} takes an integer, got {value!r}"
        if self.kind == "number" and not _NUMBER.match(value):
            return f"{flag} takes a number, got {value!r}"
        if self.kind == "choice" and value not in self.choices:
            return f"{flag} takes one of {', '.join(self.choices)}, got {value!r}"
        if self.kind == "name" and not _NAME.match(value):
            return f"{flag} takes a name of lowercase letters, digits, '_' and '-', got {value!r}"
        if self.kind == "json":
            return _json_problem(flag, value, self.choices)
        return None


def _json_problem(flag: str, text: str, keys: tuple[str, ...]) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        return f"{flag} takes a JSON object, got {text[:60]!r}"
    if not isinstance(value, dict):
        return f"{flag} takes a JSON object, got {text[:60]!r}"
    unknown = sorted(k for k in value if k not in keys)
    if unknown:
        return f"{flag} key {unknown[0]!r} is not allowed (allowed: {', '.join(keys)})"
    if not _plain(value, depth=0):
        return (f"{flag} values must be numbers, true/false, strings of letters, digits, '_' and '-', or objects "
                "and lists of those")
    return None


def _plain(value, depth: int) -> bool:
    if depth > 3:
        return False
    if isinstance(value, dict):
        return all(isinstance(k, str) and _WORD.match(k) and _plain(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, str):
        return bool(_WORD.match(value))
    return value is None or isinstance(value, bool | int | float)


def _rules(kind: str, *flags: str, choices: tuple[str, ...] = ()) -> dict[str, FlagRule]:
    return {flag: FlagRule(kind, choices) for flag in flags}


# docs/ascend-pd-launch-facts.md §1.3 and the vllm-ascend tutorials it cites; all accepted by simcluster/engine/args.py too.
VLLM_ASCEND_FLAGS: Mapping[str, FlagRule] = MappingProxyType({
    **_rules("switch", "--enforce-eager", "--trust-remote-code", "--enable-prefix-caching",
             "--no-enable-prefix-caching", "--enable-chunked-prefill", "--no-enable-chunked-prefill",
             "--disable-log-requests", "--disable-log-stats", "--disable-uvicorn-access-log",
             "--enable-auto-tool-choice"),
    **_rules("int", "--seed", "--max-num-batched-tokens", "--block-size", "--api-server-count"),
    **_rules("number", "--gpu-memory-utilization", "--swap-space"),
    "--quantization": FlagRule("choice", ("ascend",)),
    "--distributed-executor-backend": FlagRule("choice", ("mp",)),  # it also takes a class to import
    "--dtype": FlagRule("choice", ("auto", "bfloat16", "float16", "half", "float32", "float")),
    "--uvicorn-log-level": FlagRule("choice", ("critical", "error", "warning", "info", "debug", "trace")),
    **_rules("name", "--reasoning-parser", "--tool-call-parser"),  # built-in parsers by name
    "--compilation-config": FlagRule("json", ("cudagraph_mode", "cudagraph_capture_sizes", "level", "mode")),
    "--speculative-config": FlagRule("json", ("method", "num_speculative_tokens")),
    "--additional-config": FlagRule("json", ("enable_shared_expert_dp", "finegrained_tp_config",
                                             "multistream_overlap_shared_expert", "recompute_scheduler_enable",
                                             "torchair_graph_config")),
})

# docs/ascend-pd-launch-facts.md §1.2 (and the extra env it lists from other primary docs): tuning, NICs, timeouts, ports.
VLLM_ASCEND_ENV: frozenset[str] = frozenset({
    "OMP_PROC_BIND", "OMP_NUM_THREADS", "PYTORCH_NPU_ALLOC_CONF", "TASK_QUEUE_ENABLE", "HCCL_OP_EXPANSION_MODE",
    "VLLM_USE_V1", "HCCL_BUFFSIZE", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME",
    "HCCL_EXEC_TIMEOUT", "HCCL_CONNECT_TIMEOUT", "VLLM_RPC_TIMEOUT", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
    "VLLM_ENGINE_ITERATION_TIMEOUT_S", "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", "ASCEND_CONNECT_TIMEOUT",
    "ASCEND_TRANSFER_TIMEOUT", "ASCEND_BASE_PORT", "MOONCAKE_GLOBAL_SEGMENT_SIZE", "ASCEND_ENABLE_USE_FABRIC_MEM",
    "VLLM_LOGGING_LEVEL", "HCCL_INTRA_ROCE_ENABLE", "ACL_OP_INIT_MODE", "VLLM_ENGINE_READY_TIMEOUT_S",
    *("LD_LIBRARY_PATH", "LD_PRELOAD"),
})

# Library search paths the KV pool docs extend (docs/ascend-pd-launch-facts.md §1.2, §3.4): only as
# {prepend: ..}/{append: ..} of absolute directories or files already on the node, never replacing the node's value
# and never a relative path (which would resolve against the run dir).
PATH_ENV: frozenset[str] = frozenset({"LD_LIBRARY_PATH", "LD_PRELOAD"})

# The simulated engine's own knobs (simcluster/README.md): timings and scales, nothing that loads code.
SIM_ENV: frozenset[str] = VLLM_ASCEND_ENV | {
    "SIMCLUSTER_STARTUP_S", "SIMCLUSTER_TIME_SCALE", "SIMCLUSTER_KV_SCALE", "SIMCLUSTER_MODEL_PROFILE"}

# The vllm-cpu profile (docs/real-engine.md): the engine-neutral flags of VLLM_ASCEND_FLAGS, without the Ascend ones
# (--quantization ascend, --additional-config) and those that mean GPU/NPU memory or graphs on a CPU engine.
VLLM_CPU_FLAGS: Mapping[str, FlagRule] = MappingProxyType({
    **{flag: rule for flag, rule in VLLM_ASCEND_FLAGS.items()
       if flag not in ("--quantization", "--additional-config", "--gpu-memory-utilization", "--swap-space",
                       "--compilation-config", "--speculative-config")},
    "--distributed-executor-backend": FlagRule("choice", ("uni", "mp")),  # the profile renders uni (vllm_cpu.py)
    "--optimization-level": FlagRule("choice", ("0", "1", "2", "3")),  # 0: no torch.compile, a faster cold start
})

# vLLM's CPU backend knobs (KV cache GiB, OpenMP thread binding and count) and its timeouts and log level: sizes
# and words, nothing that names a program or a path.
VLLM_CPU_ENV: frozenset[str] = frozenset({
    "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "OMP_NUM_THREADS",
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "OMP_PROC_BIND", "VLLM_LOGGING_LEVEL", "VLLM_RPC_TIMEOUT", "VLLM_ENGINE_ITERATION_TIMEOUT_S",
    "VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
})

# Runs Python shipped with the model: only for weights already on the nodes, never a hub id fetched at start.
REMOTE_CODE_FLAG = "--trust-remote-code"
