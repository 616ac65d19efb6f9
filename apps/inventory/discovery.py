"""The discover job: SSH to a node, read `npu-smi`, and store its NPU dies; on any failure keep what was stored."""

from apps.jobs.choices import JobKind, NodeStepState
from apps.jobs.context import JobContext, JobFailed
from apps.jobs.registry import job_handler
from sshexec import SshConnection, SshError

from .choices import Reachability
from .models import Node
from .npu_rows import npu_rows_store
from .npu_smi import NpuSmiParseError, npu_smi_missing, npu_smi_parse_health, npu_smi_parse_info
from .reachability import mark_ssh_failure, node_mark
from .ssh_targets import NodeNotReady, ssh_target_for

COMMAND_TIMEOUT = 30


@job_handler(JobKind.DISCOVER)
def discover_node(ctx: JobContext) -> None:
    node = Node.objects.select_related("credential", "cluster").get(pk=ctx.job.target_id)
    ctx.nodes_planned({node.name: 3})
    ctx.node_state(node.name, NodeStepState.RUNNING, "connecting")
    try:
        target = ssh_target_for(node)
    except NodeNotReady as exc:
        node_mark(node, Reachability.NO_HOST_KEY if "host key" in str(exc) else Reachability.UNKNOWN, str(exc))
        _fail(ctx, node, str(exc))
    ctx.step(f"connecting to {target.username}@{node.address}:{node.ssh_port}", node=node.name)
    conn = SshConnection(target)
    try:
        info_text = _run(ctx, conn, node, "npu-smi info")
        ctx.node_state(node.name, NodeStepState.RUNNING, "read npu-smi info", step_done=True)
        try:
            info = npu_smi_parse_info(info_text)
        except NpuSmiParseError as exc:
            _fail(ctx, node, f"cannot parse `npu-smi info` from {node.name}: {exc}; stored NPUs left unchanged")
        health = _health_by_npu(ctx, conn, node, sorted({d.npu_id for d in info.dies}))
        ctx.node_state(node.name, NodeStepState.RUNNING, "read health", step_done=True)
    finally:
        conn.close()
    count = npu_rows_store(node, info, health)
    node_mark(node, Reachability.REACHABLE)
    expected = f" (inventory expects {node.npu_count})" if node.npu_count and node.npu_count != count else ""
    ctx.summary = f"{node.name}: {count} NPU dies discovered{expected}"
    ctx.step(ctx.summary, node=node.name)
    ctx.node_state(node.name, NodeStepState.DONE, ctx.summary, step_done=True)


def _run(ctx: JobContext, conn: SshConnection, node: Node, command: str, display: str | None = None) -> str:
    ctx.step(f"$ {display or command}", node=node.name)
    try:
        result = conn.run(command, timeout=COMMAND_TIMEOUT)
    except SshError as exc:
        _fail(ctx, node, mark_ssh_failure(node, exc))
    node_mark(node, Reachability.REACHABLE)
    if result.command_missing:
        _fail(ctx, node, npu_smi_missing(node.name))
    if result.exit_status != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        _fail(ctx, node, f"`{display or command}` exited {result.exit_status} on {node.name}: {' | '.join(tail)}")
    return result.stdout


HEALTH_MARK = "### pdcp npu "


def _health_by_npu(ctx: JobContext, conn: SshConnection, node: Node, npu_ids: list[int]) -> dict[int, str]:
    """One round trip for every NPU's health query (ids are ints from the parsed table, never user text)."""
    if not npu_ids:
        return {}
    command = "; ".join(f"echo '{HEALTH_MARK}{int(i)}'; npu-smi info -t health -i {int(i)}" for i in npu_ids)
    sections: dict[int, list[str]] = {}
    current = None
    shown = f"npu-smi info -t health -i N   (N = {', '.join(map(str, npu_ids))})"
    for line in _run(ctx, conn, node, command, display=shown).splitlines():
        if line.startswith(HEALTH_MARK):
            current = int(line[len(HEALTH_MARK):])
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    health = {}
    for npu_id in npu_ids:
        try:
            health[npu_id] = npu_smi_parse_health("\n".join(sections.get(npu_id, [])))
        except NpuSmiParseError as exc:
            _fail(ctx, node, f"cannot parse the health of NPU {npu_id} on {node.name}: {exc}")
    return health


def _fail(ctx: JobContext, node: Node, message: str):
    ctx.node_state(node.name, NodeStepState.FAILED, message)
    raise JobFailed(message)
