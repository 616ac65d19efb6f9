"""Fan one command per (target, command) pair out over persistent connections, with a bound."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

from .connection import CommandResult, SshConnection
from .errors import SshError
from .target import SshTarget

__all__ = ["SshPool", "TargetResult", "run_on_many"]

WAIT_TICK_S = 0.02
# on_output(target_name, stream, line)
ManyOutputCallback = Callable[[str, str, str], None]


@dataclass(frozen=True)
class TargetResult:
    """The outcome of one command on one target: a result, or the SshError that prevented one."""

    target: str
    command: str
    result: CommandResult | None
    error: SshError | None

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.ok


class SshPool:
    """One SshConnection per target (keyed by the whole target, so changed credentials reconnect)."""

    def __init__(self, **connection_options):
        self._options = connection_options
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._connections: dict[SshTarget, SshConnection] = {}

    def connection(self, target: SshTarget) -> SshConnection:
        if self._pid != os.getpid():
            # A forked child starts with an empty pool; each connection would reopen anyway.
            self._pid, self._lock, self._connections = os.getpid(), threading.Lock(), {}
        with self._lock:
            conn = self._connections.get(target)
            if conn is None:
                conn = self._connections[target] = SshConnection(target, **self._options)
            return conn

    def run(self, target: SshTarget, command: str, timeout: float = 300.0, on_output=None) -> CommandResult:
        return self.connection(target).run(command, timeout=timeout, on_output=on_output)

    def run_on_many(self, targets_and_commands: Iterable[tuple[SshTarget, str]], *, max_parallel: int = 8,
                    timeout: float = 300.0, on_output: ManyOutputCallback | None = None,
                    while_waiting: Callable[[], None] | None = None) -> list[TargetResult]:
        """Run every pair, at most `max_parallel` at once; results come back in the input order.

        A failure on one target (unreachable, auth, timeout) becomes that pair's `error` and never
        stops the others. `on_output` runs on the pool's threads; `while_waiting` runs on the caller's thread
        every few milliseconds until all pairs are done (to hand streamed lines to code that must stay on it).
        """
        pairs = list(targets_and_commands)
        if max_parallel < 1:
            raise ValueError("max_parallel must be at least 1")

        def one(pair: tuple[SshTarget, str]) -> TargetResult:
            target, command = pair
            callback = None
            if on_output is not None:
                def callback(stream: str, line: str, _name=target.name) -> None:
                    on_output(_name, stream, line)
            try:
                result = self.run(target, command, timeout=timeout, on_output=callback)
            except SshError as exc:
                return TargetResult(target.name, command, None, exc)
            return TargetResult(target.name, command, result, None)

        if not pairs:
            return []
        with ThreadPoolExecutor(max_workers=min(max_parallel, len(pairs)), thread_name_prefix="ssh") as pool:
            futures = [pool.submit(one, pair) for pair in pairs]
            pending = set(futures)
            while pending and while_waiting is not None:
                pending = wait(pending, timeout=WAIT_TICK_S).not_done
                while_waiting()
            return [f.result() for f in futures]

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close()

    def __enter__(self) -> SshPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_on_many(targets_and_commands: Iterable[tuple[SshTarget, str]], max_parallel: int = 8, *,
                timeout: float = 300.0, on_output: ManyOutputCallback | None = None,
                **connection_options) -> list[TargetResult]:
    """One-off fan-out with its own pool, closed afterwards (a long-lived SshPool reuses connections)."""
    with SshPool(**connection_options) as pool:
        return pool.run_on_many(targets_and_commands, max_parallel=max_parallel, timeout=timeout,
                                on_output=on_output)
