"""NPU telemetry: every half minute, `npu-smi info` over SSH on each polled node refreshes its Npu rows' readings.

Not a job and not audited (it changes no configuration, and a job row every 30 s per node would bury the real
ones). Which nodes it polls: those with a credential, a pinned host key, NPUs, and a reachability that a retry
can fix (reachable, or unreachable since the network may come back). A changed host key or a refused login needs
an operator (pin the new key, fix the credential) and then a discover job; polling such a node every 30 s would
only hammer its sshd. A node never discovered has no rows to refresh. Failures keep the rows as they were.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.core.cache import cache

from sshexec import SshError, TargetResult, run_on_many

from .choices import Reachability
from .models import Node
from .npu_rows import npu_rows_store
from .npu_smi import NpuSmiParseError, npu_smi_missing, npu_smi_parse_info
from .reachability import node_mark, reachability_of, ssh_failure_advice
from .ssh_targets import NodeNotReady, ssh_target_for

logger = logging.getLogger(__name__)

POLLED_REACHABILITY = (Reachability.REACHABLE, Reachability.UNREACHABLE)
MAX_PARALLEL = 16
CONNECT_TIMEOUT_S = 5.0
COMMAND_TIMEOUT_S = 10.0
LOCK = "inventory:npu-poll:lock"
LOCK_TTL_S = 120  # longer than a round can take (connect + command per batch); a crashed round frees it then


@dataclass
class NpuPollRound:
    polled: int = 0
    refreshed_rows: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # node name -> why
    skipped: bool = False  # another round still running


def nodes_to_poll():
    return (Node.objects.select_related("credential")
            .filter(npu_count__gt=0, credential__isnull=False, reachability__in=POLLED_REACHABILITY)
            .exclude(host_key=""))


def npu_poll_round(*, max_parallel: int = MAX_PARALLEL) -> NpuPollRound:
    """One round over every polled node, in parallel; a round still running makes this one a no-op."""
    if not cache.add(LOCK, 1, timeout=LOCK_TTL_S):
        return NpuPollRound(skipped=True)
    try:
        return _poll(list(nodes_to_poll()), max_parallel=max_parallel)
    finally:
        cache.delete(LOCK)


def _poll(nodes: list[Node], *, max_parallel: int) -> NpuPollRound:
    ready, not_ready = [], {}
    for node in nodes:
        try:
            ready.append((node, ssh_target_for(node)))
        except (NodeNotReady, SshError) as exc:  # the query excludes most; an undecryptable secret it cannot
            not_ready[node.name] = f"NPU telemetry skipped: {exc}"
            logger.warning("%s", not_ready[node.name])
    out = NpuPollRound(polled=len(ready), failed=not_ready)
    results = run_on_many([(target, "npu-smi info") for _, target in ready], max_parallel=max_parallel,
                          timeout=COMMAND_TIMEOUT_S, connect_timeout=CONNECT_TIMEOUT_S, connect_retries=0)
    for (node, _), result in zip(ready, results, strict=True):  # run_on_many keeps the input order
        problem = _store_one(node, result, out)
        if problem:
            out.failed[node.name] = problem
    return out


def _store_one(node: Node, result: TargetResult, out: NpuPollRound) -> str:
    if result.error is not None:
        state = reachability_of(result.error)
        if state is not None:
            _mark(node, state, str(result.error))
        return ssh_failure_advice(node.name, result.error)
    cmd = result.result
    if cmd.command_missing:
        problem = f"NPU telemetry: {npu_smi_missing(node.name)}"
    elif cmd.exit_status != 0:
        tail = (cmd.stderr or cmd.stdout).strip().splitlines()[-3:]
        problem = f"NPU telemetry: `npu-smi info` exited {cmd.exit_status} on {node.name}: {' | '.join(tail)}"
    else:
        try:
            info = npu_smi_parse_info(cmd.stdout)
        except NpuSmiParseError as exc:
            problem = f"NPU telemetry: cannot parse `npu-smi info` from {node.name}: {exc}; NPU readings kept"
        else:
            out.refreshed_rows += npu_rows_store(node, info, refresh_only=True)
            _mark(node, Reachability.REACHABLE, "")
            return ""
    # SSH worked, so the node is reachable; the detail says why its NPU readings did not move.
    _mark(node, Reachability.REACHABLE, problem)
    return problem


def _mark(node: Node, state: Reachability, detail: str) -> None:
    if node_mark(node, state, detail, unless_changed=True) and state != node.reachability:
        logger.info("node %s: %s -> %s (%s)", node.name, node.reachability, state, detail or "npu telemetry")
