"""BackendLease: a leg is counted in flight from entering to leaving its block, whatever ends it, and its
connection goes back to the idle pool only when the answer was read whole (no processes: fake connections)."""

import asyncio

import pytest

from pdproxy.backend_pool import HEALTHY, Backend
from pdproxy.http_client import BackendError
from pdproxy.lease import BackendLease, ConnectionLease


class FakeConn:
    """What a lease uses of a ClientConnection. `fail`: the BackendError read_head raises; `hang`: it never
    answers."""

    def __init__(self, fail: BackendError | None = None, hang: bool = False):
        self.fail, self.hang = fail, hang
        self.closed = self.complete = self.reusable = False
        self.sent = []

    def send(self, data, first_byte_timeout):
        self.sent.append((data, first_byte_timeout))

    async def read_head(self):
        if self.hang:
            await asyncio.Event().wait()
        if self.fail is not None:
            raise self.fail

    async def read_body(self, timeout):
        self.complete = self.reusable = True
        return b"body"

    def disarm(self):
        pass

    def close(self):
        self.closed = True


def backend(*idle) -> Backend:
    b = Backend("decode", "127.0.0.1:9", state=HEALTHY)
    b.idle = list(idle)  # take_connection pops from the end
    return b


def counts(b: Backend):
    return b.inflight, b.inflight_load, b.requests


def test_an_answer_read_whole_gives_the_connection_back_and_the_count_drops_once():
    conn = FakeConn()
    b = backend(conn)

    async def go():
        lease = BackendLease(b, 2.5)
        async with lease:
            assert counts(b) == (1, 2.5, 1)
            assert await lease.send(None, 1.0, b"req", lambda: 7.0) is conn
            assert await lease.read_whole(1.0) == b"body"
        return counts(b)

    assert asyncio.run(go()) == (0, 0.0, 1)
    assert b.idle == [conn] and not conn.closed and conn.sent == [(b"req", 7.0)]


@pytest.mark.parametrize("ending", ["backend_error", "other_error", "cancelled"])
def test_whatever_ends_the_block_the_count_drops_once_and_the_connection_is_closed(ending):
    conn = FakeConn(fail=BackendError("timeout", "no response") if ending == "backend_error" else None,
                    hang=ending == "cancelled")
    b = backend(conn)

    async def leg():
        lease = BackendLease(b, 1.0)
        async with lease:
            await lease.send(None, 1.0, b"req", lambda: 1.0)
            raise ValueError("judged badly")

    async def go():
        task = asyncio.get_running_loop().create_task(leg())
        await asyncio.sleep(0.01)
        assert counts(b) == (0, 0.0, 1) if task.done() else counts(b) == (1, 1.0, 1)
        task.cancel()
        with pytest.raises((BackendError, ValueError, asyncio.CancelledError)):
            await task

    asyncio.run(go())
    assert counts(b) == (0, 0.0, 1)
    assert conn.closed and b.idle == []


def test_a_stale_keep_alive_connection_is_retried_once_on_another():
    stale = FakeConn(fail=BackendError("reset", "backend closed the connection before answering"))
    fresh = FakeConn()
    b = backend(fresh, stale)

    async def go():
        lease = ConnectionLease(b)
        async with lease:
            assert await lease.send(None, 1.0, b"req", lambda: 1.0) is fresh
            await lease.read_whole(1.0)

    asyncio.run(go())
    assert stale.closed and b.idle == [fresh] and counts(b) == (0, 0.0, 0)  # ConnectionLease counts nothing


def test_a_reset_after_the_answer_started_is_not_retried():
    started = FakeConn(fail=BackendError("reset", "backend closed the connection mid-response", True))
    other = FakeConn()
    b = backend(other, started)

    async def go():
        lease = BackendLease(b, 1.0)
        async with lease:
            await lease.send(None, 1.0, b"req", lambda: 1.0)

    with pytest.raises(BackendError):
        asyncio.run(go())
    assert started.closed and b.idle == [other] and counts(b) == (0, 0.0, 1)
