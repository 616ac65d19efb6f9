"""The deployment jobs' SSH side: one persistent connection per node (SshPool), bounded parallel fan-out, and
every line of output streamed into the job's events from the job's own thread (pool threads never touch the
database, so no connection leaks and no cross-thread transactions)."""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from apps.inventory.choices import Reachability
from apps.inventory.discovery import node_mark
from apps.inventory.models import Node
from apps.inventory.ssh_targets import NodeNotReady, ssh_target_for
from apps.jobs.context import JobContext
from apps.jobs.ssh import (
    CommandResult,
    SshAuthFailed,
    SshCommandTimeout,
    SshError,
    SshHostKeyMismatch,
    SshPool,
    SshUnreachable,
)


class NodeFailure(Exception):
    """A node could not run a command (SSH-level); the message says which node and what to do."""

    def __init__(self, node: str, message: str):
        self.node = node
        super().__init__(message)


def describe_ssh_error(node: Node, exc: Exception) -> str:
    if isinstance(exc, SshHostKeyMismatch):
        node_mark(node, Reachability.HOST_KEY_MISMATCH, str(exc))
        return (f"{exc}. If {node.name} was reinstalled, fetch and pin its new key on the node page; otherwise "
                "treat this as a possible man-in-the-middle")
    if isinstance(exc, SshAuthFailed):
        node_mark(node, Reachability.AUTH_FAILED, str(exc))
        return f"{exc}: check the node's credential"
    if isinstance(exc, SshUnreachable):
        node_mark(node, Reachability.UNREACHABLE, str(exc))
        return f"{exc}: is the node up and its sshd running?"
    if isinstance(exc, SshCommandTimeout):
        return str(exc)
    return f"SSH to {node.name} failed: {exc}"


@dataclass
class Outcome:
    node: str
    command: str
    result: CommandResult | None
    error: str | None  # SSH-level failure, already described

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.ok


class Fleet:
    def __init__(self, ctx: JobContext, nodes: dict[str, Node], *, max_parallel: int = 8):
        self.ctx = ctx
        self.nodes = nodes
        self.max_parallel = max(1, int(max_parallel))
        self.pool = SshPool()
        self._targets = {}

    def target(self, name: str):
        if name not in self._targets:
            node = self.nodes.get(name)
            if node is None:
                raise NodeFailure(name, f"node {name} is no longer in the cluster inventory")
            try:
                self._targets[name] = ssh_target_for(node)
            except NodeNotReady as exc:
                raise NodeFailure(name, str(exc)) from None
        return self._targets[name]

    def run_many(self, pairs: list[tuple[str, str]], *, timeout: float = 60, stream: bool = False,
                 quiet: bool = False) -> list[Outcome]:
        """Run (node, command) pairs, at most max_parallel at once; results in input order. SSH failures become
        the outcome's `error`; a command's own exit status is the caller's to judge."""
        if not pairs:
            return []
        lines: queue.Queue = queue.Queue()
        outcomes: list[Outcome | None] = [None] * len(pairs)

        def one(i: int, node: str, command: str) -> None:
            try:
                target = self.target(node)
            except NodeFailure as exc:
                outcomes[i] = Outcome(node, command, None, str(exc))
                return
            sink = (lambda stream_, line, _n=node: lines.put((_n, stream_, line))) if stream else None
            try:
                result = self.pool.run(target, command, timeout=timeout, on_output=sink)
                outcomes[i] = Outcome(node, command, result, None)
            except SshError as exc:
                outcomes[i] = Outcome(node, command, None, exc)  # described on the job's thread
            except Exception as exc:  # noqa: BLE001 - reported as this pair's failure, never lost in a thread
                outcomes[i] = Outcome(node, command, None, f"{type(exc).__name__}: {exc}")

        with ThreadPoolExecutor(max_workers=min(self.max_parallel, len(pairs)), thread_name_prefix="deploy-ssh") as ex:
            futures = [ex.submit(one, i, n, c) for i, (n, c) in enumerate(pairs)]
            while not all(f.done() for f in futures):
                self._drain(lines)
                time.sleep(0.02)
            self._drain(lines)
        for o in outcomes:
            if isinstance(o.error, SshError):
                o.error = describe_ssh_error(self.nodes[o.node], o.error)
            if o.error and not quiet:
                self.ctx.log(o.error, node=o.node, stream="error")
        return outcomes  # type: ignore[return-value]

    def _drain(self, lines: queue.Queue) -> None:
        while True:
            try:
                node, stream, line = lines.get_nowait()
            except queue.Empty:
                return
            self.ctx.log(line, node=node, stream=stream)

    def run(self, node: str, command: str, *, timeout: float = 60, stream: bool = False) -> CommandResult:
        outcome = self.run_many([(node, command)], timeout=timeout, stream=stream, quiet=True)[0]
        if outcome.error:
            raise NodeFailure(node, outcome.error)
        return outcome.result

    def put_text(self, node: str, path: str, text: str, mode: int = 0o600) -> None:
        try:
            self.pool.connection(self.target(node)).put_text(path, text, mode=mode)
        except SshError as exc:
            raise NodeFailure(node, describe_ssh_error(self.nodes[node], exc)) from None

    def close(self) -> None:
        threading.Thread(target=self.pool.close, daemon=True).start()  # never let a hung socket block the job end
