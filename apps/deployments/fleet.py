"""The deployment jobs' SSH side: one persistent connection per node and the executor's bounded fan-out
(sshexec.SshPool.run_on_many), with every line of output written to the job's events from the job's own thread
(pool threads never touch the database, so no connection leaks and no cross-thread transactions)."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

from apps.inventory.models import Node
from apps.inventory.reachability import mark_ssh_failure
from apps.inventory.ssh_targets import NodeNotReady, ssh_target_for
from apps.jobs.context import JobContext
from sshexec import CommandResult, SshError, SshPool, SshTarget


class NodeFailure(Exception):
    """A node could not run a command (SSH-level); the message says which node and what to do."""

    def __init__(self, node: str, message: str):
        self.node = node
        super().__init__(message)


@dataclass
class Outcome:
    node: str
    command: str
    result: CommandResult | None
    error: str | None  # SSH-level failure, in words, with what to do

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.ok


class Fleet:
    def __init__(self, ctx: JobContext, nodes: dict[str, Node], *, max_parallel: int = 8):
        self.ctx = ctx
        self.nodes = nodes
        self.max_parallel = max(1, int(max_parallel))
        self.pool = SshPool()
        self._targets: dict[str, SshTarget] = {}

    def target(self, name: str) -> SshTarget:
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
        outcomes: list[Outcome | None] = [None] * len(pairs)
        runnable: list[tuple[int, SshTarget, str]] = []
        for i, (node, command) in enumerate(pairs):
            try:
                runnable.append((i, self.target(node), command))
            except NodeFailure as exc:
                outcomes[i] = Outcome(node, command, None, str(exc))
        lines: queue.Queue = queue.Queue()
        sink = (lambda node, stream_, line: lines.put((node, stream_, line))) if stream else None
        results = self.pool.run_on_many([(t, c) for _, t, c in runnable], max_parallel=self.max_parallel,
                                        timeout=timeout, on_output=sink, while_waiting=lambda: self._drain(lines))
        self._drain(lines)
        for (i, _, command), r in zip(runnable, results, strict=True):
            node = pairs[i][0]
            error = mark_ssh_failure(self.nodes[node], r.error) if r.error is not None else None
            outcomes[i] = Outcome(node, command, r.result, error)
        if not quiet:
            for o in outcomes:
                if o.error:
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
            raise NodeFailure(node, mark_ssh_failure(self.nodes[node], exc)) from None

    def close(self) -> None:
        threading.Thread(target=self.pool.close, daemon=True).start()  # never let a hung socket block the job end
