"""Turn `vllm serve` args + environment + the node's config into what one engine process runs."""

from __future__ import annotations

import logging
import os
import secrets
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from simcluster import nodestate
from simcluster.engine import kvconfig, lookup, poolconfig
from simcluster.engine.answers import AnswerBook, AnswerBookError
from simcluster.npusmi import HBM_TOTAL_MB
from simcluster.profiles import ModelProfile, profile_for

log = logging.getLogger("simcluster.engine")


class ConfigError(SystemExit):
    """Exit with a message, as vLLM does on a bad launch."""


@dataclass
class EngineConfig:
    model: str
    served_names: list[str]
    host: str
    port: int
    tp: int
    dp_size: int
    dp_ranks: list[int]  # global DP ranks hosted by this process
    kv_role: str | None  # kv_producer | kv_consumer | kv_both | None
    kv_port: int | None
    kv_connector: str | None
    kv_load_failure_policy: str
    max_num_seqs: int
    max_model_len: int
    devices: list[int]
    hbm_mb_per_die: int
    profile: ModelProfile
    abort_timeout_s: float
    node_dir: Path | None
    engine_ids: dict[int, str] = field(default_factory=dict)
    answers: AnswerBook | None = None  # None: every prompt gets the plain simulated text
    store: kvconfig.StorePlan | None = None  # the AscendStoreConnector, if configured
    pool: poolconfig.MooncakePool | poolconfig.MemcachePool | None = None  # its backend's config
    lookup_sockets: list[Path] = field(default_factory=list)  # one per DP rank (engine/lookup.py)
    hash_seed: str = ""  # vLLM's NONE_HASH stand-in: PYTHONHASHSEED, or random per process
    enable_prefix_caching: bool = True
    kv_events: object = None  # KVEventsConfig from --kv-events-config (engine/kv_events.py)
    num_gpu_blocks: int | None = None  # --num-gpu-blocks-override
    kv_push_timeout_s: float = 480.0  # MooncakeLayerwiseConnector Decode: how long it waits for the Prefill's push


def _bind_host(requested: str | None, node: dict) -> str:
    address = node.get("address")
    if requested in (None, "0.0.0.0", "::", ""):
        chosen = address or "127.0.0.1"
        # The contract forbids wildcard binds; the node's own loopback address stands in for "all".
        log.warning("--host %s requested: binding the node address %s instead", requested, chosen)
        return chosen
    return requested


def _devices(env_value: str | None, needed: int) -> list[int]:
    if env_value:
        devices = [int(d) for d in env_value.split(",") if d.strip()]
    else:
        devices = list(range(needed))
    if len(devices) < needed:
        raise ConfigError(f"ValueError: need {needed} NPU dies (TP x local DP) but ASCEND_RT_VISIBLE_DEVICES "
                          f"gives {len(devices)}: {env_value!r}")
    return devices[:needed]


def _answer_book(env) -> AnswerBook | None:
    """SIMCLUSTER_ANSWER_BOOK (a book's name), SIMCLUSTER_ACCURACY (0..1, default 1), SIMCLUSTER_THINK (0|1)."""
    raw_accuracy, raw_think = env.get("SIMCLUSTER_ACCURACY", "1.0"), env.get("SIMCLUSTER_THINK", "0")
    try:
        accuracy = float(raw_accuracy)
    except ValueError:
        accuracy = -1.0
    if not 0.0 <= accuracy <= 1.0:  # also refuses nan
        raise ConfigError(f"SIMCLUSTER_ACCURACY must be a number from 0 to 1, got {raw_accuracy!r}")
    if raw_think not in ("0", "1"):
        raise ConfigError(f"SIMCLUSTER_THINK must be 0 or 1, got {raw_think!r}")
    name = env.get("SIMCLUSTER_ANSWER_BOOK")
    if not name:
        return None
    try:
        return AnswerBook.named(name, accuracy, raw_think == "1")
    except (AnswerBookError, OSError) as exc:
        raise ConfigError(f"SIMCLUSTER_ANSWER_BOOK: {exc}") from None


def _pool(store: kvconfig.StorePlan | None, env):
    if store is None:
        return None
    return poolconfig.mooncake(env) if store.backend == "mooncake" else poolconfig.memcache(env)


def _hash_seed(env, store) -> str:
    seed = env.get("PYTHONHASHSEED")
    if seed is None:
        if store is not None:
            # vLLM's init_none_hash draws NONE_HASH from os.urandom without it (and warns only for CBOR hash
            # functions): this engine's pool keys then match no other engine's.
            log.warning("PYTHONHASHSEED is not set: block hashes are random per process, so no other engine will "
                        "find this engine's blocks in the KV pool, nor it theirs (set PYTHONHASHSEED=0 everywhere)")
        return "random:" + secrets.token_hex(16)
    return seed


def build_config(args) -> EngineConfig:
    node_dir = nodestate.node_dir()
    node = nodestate.node_config(node_dir)
    env = os.environ
    try:
        plan = kvconfig.plan(args.kv_transfer_config)
        pool = _pool(plan.store, env)
    except kvconfig.KVConfigError as exc:
        raise ConfigError(str(exc)) from None
    dp_local = args.data_parallel_size_local
    if dp_local is None:
        dp_local = 1 if args.data_parallel_rank is not None or args.data_parallel_size == 1 else args.data_parallel_size
    first_rank = args.data_parallel_rank if args.data_parallel_rank is not None else args.data_parallel_start_rank
    dp_ranks = list(range(first_rank, first_rank + dp_local))
    if dp_ranks[-1] >= args.data_parallel_size:
        raise ConfigError(f"data parallel rank {dp_ranks[-1]} >= data parallel size {args.data_parallel_size}")
    devices = _devices(env.get("ASCEND_RT_VISIBLE_DEVICES"), args.tensor_parallel_size * dp_local)
    answers = _answer_book(env)
    fixed_id = plan.engine_id
    sockets = []
    if plan.store is not None and not plan.store.use_layerwise:  # vllm-ascend binds none with use_layerwise
        base = lookup.base_dir(env, node_dir)
        sockets = [lookup.socket_path(base, plan.store.lookup_rpc_port, r) for r in dp_ranks]
    return EngineConfig(
        model=args.model,
        served_names=args.served_model_name or [args.model],
        host=_bind_host(args.host, node),
        port=args.port,
        tp=args.tensor_parallel_size,
        dp_size=args.data_parallel_size,
        dp_ranks=dp_ranks,
        kv_role=plan.kv_role,
        kv_port=plan.kv_port,
        kv_connector=plan.kv_connector,
        kv_load_failure_policy=plan.kv_load_failure_policy,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        devices=devices,
        hbm_mb_per_die=max(1000, int(HBM_TOTAL_MB * args.gpu_memory_utilization) - 3300),
        profile=profile_for(args.model),
        abort_timeout_s=float(env.get("VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", "480")),
        node_dir=node_dir,
        engine_ids={r: (f"{fixed_id}-{r}" if fixed_id and dp_local > 1 else fixed_id) or str(uuid.uuid4())
                    for r in dp_ranks},
        answers=answers,
        store=plan.store,
        pool=pool,
        lookup_sockets=sockets,
        hash_seed=_hash_seed(env, plan.store),
        enable_prefix_caching=args.enable_prefix_caching,
        kv_events=args.kv_events_config,
        num_gpu_blocks=args.num_gpu_blocks_override,
        kv_push_timeout_s=float(env.get("SIMCLUSTER_KV_PUSH_TIMEOUT_S",
                                        env.get("VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", "480"))),
    )
