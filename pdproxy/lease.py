"""Holding a backend instance for one exchange: its connection and, for a PD leg, its in-flight count.

    lease = BackendLease(backend, load)
    async with lease:
        conn = await lease.send(loop, connect_timeout, request_bytes, first_byte_timeout)
        body = await lease.read_whole(timeout)      # the connection goes back to the idle pool

Whatever happens inside (an answer read whole, a backend error, a timeout, the client going away and the task
being cancelled), leaving the block gives everything back once: the connection is closed unless the answer
was read whole, and a BackendLease's in-flight count (what least_conn and the bounded-load hash read, and the
admin API and pdproxy_backend_inflight show) drops by what entering added.
"""

from __future__ import annotations

from collections.abc import Callable

from .backend_pool import Backend
from .http_client import DONE, BackendError, ClientConnection, Done, build_request, open_connection


class ConnectionLease:
    """One connection to `backend` for one exchange, not counted as a leg in flight (e.g. /v1/models).

    Entering and leaving happen twice per client request on the hot path: __aenter__ and __aexit__ are plain
    methods that return an awaitable already done (http_client.DONE) rather than coroutines, which cost
    measurably more (bench/proxy/compare.py). The price: `async with lease as x` binds None, so a lease is
    made before its block."""

    __slots__ = ("backend", "conn")

    def __init__(self, backend: Backend):
        self.backend = backend
        self.conn: ClientConnection | None = None

    def __aenter__(self) -> Done:
        return DONE

    def __aexit__(self, exc_type, exc, tb) -> Done:
        self.close()
        return DONE

    def close(self):
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

    async def send(self, loop, connect_timeout: float, request: bytes,
                   first_byte_timeout: Callable[[], float]) -> ClientConnection:
        """Send `request` and wait for the answer's head. first_byte_timeout() is asked once a connection is
        there. An idle keep-alive connection the backend closed meanwhile is not the backend's fault: the
        request goes once more, on the next idle connection or a new one. When no new one opens, the backend
        is gone and may have died holding the request: that reset is the failure, not a refused connection
        (which would tell a Decode leg the KV was never pulled, legs.py)."""
        backend = self.backend
        reset = None
        for fresh_try in (False, True):
            conn = backend.take_idle()
            reused = conn is not None
            if not reused:
                try:
                    conn = await open_connection(loop, backend.host, backend.port, connect_timeout)
                except BackendError:
                    if reset is None:
                        raise
                    raise reset from None
            self.conn = conn
            try:
                conn.send(request, first_byte_timeout())
                await conn.read_head()
                return conn
            except BackendError as exc:
                if fresh_try or not reused or exc.started or exc.kind != "reset":
                    raise
                reset = exc
                self.close()
        raise AssertionError("unreachable")

    async def read_whole(self, timeout: float) -> bytes:
        """The rest of the answer; its connection then goes back to the idle pool. (The hot path awaits
        conn.read_body and calls done() itself: one coroutine less per leg.)"""
        conn = self.conn
        body = await conn.read_body(timeout)
        self.conn = None
        self.backend.return_connection(conn)
        return body

    def done(self):
        """The answer was read whole: the connection goes back to the idle pool (or is closed, see
        Backend.return_connection)."""
        conn, self.conn = self.conn, None
        self.backend.return_connection(conn)


async def request_whole(backend: Backend, loop, connect_timeout: float, method: bytes, path: bytes,
                        timeout: float) -> tuple[ClientConnection, bytes]:
    """One request outside the PD flow (/v1/models, the reset fan-out): the answer's head (status, headers) and
    its whole body, `timeout` for each; BackendError when it fails."""
    lease = ConnectionLease(backend)
    async with lease:
        answer = await lease.send(loop, connect_timeout, build_request(method, path, backend.host_header, b"", []),
                                  lambda: timeout)
        return answer, await lease.read_whole(timeout)


class BackendLease(ConnectionLease):
    """A PD leg: counted in the backend's in-flight figures from entering the block to leaving it, and in
    its request count. `load` is the request's weight for least_conn (see Exchange.load)."""

    __slots__ = ("load",)

    def __init__(self, backend: Backend, load: float):
        self.backend = backend
        self.conn = None
        self.load = load

    def __aenter__(self) -> Done:
        b = self.backend
        b.inflight += 1
        b.inflight_load += self.load
        b.requests += 1
        return DONE

    def __aexit__(self, exc_type, exc, tb) -> Done:
        b = self.backend
        b.inflight -= 1
        b.inflight_load -= self.load
        if self.conn is not None:
            self.close()
        return DONE
