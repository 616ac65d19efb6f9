"""Turn `vllm serve` args + environment + the node's config into what one engine process runs."""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from simcluster import nodestate
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
    ascendstore_servers: list[str] = field(default_factory=list)
    kvpool_socket: str | None = None
    engine_ids: dict[int, str] = field(default_factory=dict)
    answers: AnswerBook | None = None  # None: every prompt gets the plain simulated text


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


def build_config(args) -> EngineConfig:
    node_dir = nodestate.node_dir()
    node = nodestate.node_config(node_dir)
    kv = args.kv_transfer_config or {}
    if kv.get("kv_connector") == "MultiConnector":
        # PD + pool: the P2P part of a MultiConnector carries role and port (docs/ascend-pd-launch-facts.md §3.1).
        inner = [c for c in kv.get("kv_connector_extra_config", {}).get("connectors", [])
                 if c.get("kv_connector") in ("MooncakeConnectorV1", "MooncakeLayerwiseConnector")]
        kv = {**kv, **(inner[0] if inner else {})}
    if kv.get("kv_connector") == "MooncakeConnector":
        raise ConfigError("MooncakeConnector resolves to upstream vLLM's GPU connector; use MooncakeConnectorV1")
    if kv.get("kv_role") in ("kv_producer", "kv_consumer"):
        extra = kv.get("kv_connector_extra_config", {})
        if not {"prefill", "decode"} <= set(extra):
            raise ConfigError("AssertionError: kv_connector_extra_config needs prefill and decode dp_size/tp_size")
    dp_local = args.data_parallel_size_local
    if dp_local is None:
        dp_local = 1 if args.data_parallel_rank is not None or args.data_parallel_size == 1 else args.data_parallel_size
    first_rank = args.data_parallel_rank if args.data_parallel_rank is not None else args.data_parallel_start_rank
    dp_ranks = list(range(first_rank, first_rank + dp_local))
    if dp_ranks[-1] >= args.data_parallel_size:
        raise ConfigError(f"data parallel rank {dp_ranks[-1]} >= data parallel size {args.data_parallel_size}")
    devices = _devices(os.environ.get("ASCEND_RT_VISIBLE_DEVICES"), args.tensor_parallel_size * dp_local)
    answers = _answer_book(os.environ)
    servers = os.environ.get("SIMCLUSTER_ASCENDSTORE") or ",".join(node.get("ascendstore", []))
    fixed_id = kv.get("engine_id")
    return EngineConfig(
        model=args.model,
        served_names=args.served_model_name or [args.model],
        host=_bind_host(args.host, node),
        port=args.port,
        tp=args.tensor_parallel_size,
        dp_size=args.data_parallel_size,
        dp_ranks=dp_ranks,
        kv_role=kv.get("kv_role"),
        kv_port=int(kv["kv_port"]) if kv.get("kv_port") not in (None, "") else (14579 if kv else None),
        kv_connector=kv.get("kv_connector"),
        kv_load_failure_policy=(args.kv_transfer_config or {}).get("kv_load_failure_policy", "fail"),
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        devices=devices,
        hbm_mb_per_die=max(1000, int(HBM_TOTAL_MB * args.gpu_memory_utilization) - 3300),
        profile=profile_for(args.model),
        abort_timeout_s=float(os.environ.get("VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", "480")),
        node_dir=node_dir,
        ascendstore_servers=[s for s in servers.split(",") if s],
        kvpool_socket=os.environ.get("SIMCLUSTER_KVPOOL_SOCKET") or node.get("kvpool_socket"),
        engine_ids={r: (f"{fixed_id}-{r}" if fixed_id and dp_local > 1 else fixed_id) or str(uuid.uuid4())
                    for r in dp_ranks},
        answers=answers,
    )
