"""Small pooled HTTP/1.1 client for the backend legs: httptools response parser, keep-alive, per-phase timeouts."""

from __future__ import annotations

import asyncio

import httptools

from .tcp import set_nodelay

_FINISHED = iter(())  # an exhausted iterator stays exhausted: one serves every await


class Done:
    """An awaitable that is done at once (its value is None): what the hot path's awaits get when there is
    nothing to wait for, instead of a coroutine made and run for nothing. __await__ is the exhausted
    iterator's own C method (it returns the iterator), so awaiting runs no Python code at all."""

    __slots__ = ()
    __await__ = _FINISHED.__iter__


DONE = Done()


class BackendError(Exception):
    """A backend leg failed. kind: connect | timeout | reset | garbage. `started`: response bytes were seen."""

    def __init__(self, kind: str, reason: str, started: bool = False):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.started = started


class ClientConnection(asyncio.Protocol):
    """One keep-alive connection to a backend. Body bytes go to a sink once attached, buffered until then."""

    __slots__ = ("loop", "transport", "parser", "closed", "status", "headers", "_chunks", "complete",
                 "reusable", "_head_waiter", "_done_waiter", "_sink", "_after_feed", "error", "started",
                 "_timer", "_timer_at", "_deadline", "_what", "_seconds", "idle_since")

    def __init__(self, loop):
        self.loop = loop
        self.transport = None
        self.closed = False
        self.parser = None
        # timeouts: one lazily moved timer per connection (see arm)
        self._timer = None
        self._timer_at = 0.0
        self._deadline = None
        self._what = ""
        self._seconds = 0.0
        self.idle_since = 0.0
        self._new_exchange()

    def _new_exchange(self):
        self.status = 0
        self.headers = {}
        self._chunks = []
        self.complete = False
        self.reusable = False
        self._head_waiter = None
        self._done_waiter = None
        self._sink = None
        self._after_feed = None
        self.error = None
        self.started = False

    # asyncio.Protocol
    def connection_made(self, transport):
        self.transport = transport
        set_nodelay(transport)

    def data_received(self, data):
        self.started = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BackendError("garbage", f"unparseable HTTP from backend: {exc}", True))
            self.transport.abort()
            return
        except AttributeError:  # bytes arrived while idle: the backend is not speaking HTTP/1.1 properly
            self.closed = True
            self.transport.abort()
            return
        if self._after_feed is not None:
            self._after_feed()  # e.g. forward every event this read brought in one write

    def eof_received(self):
        return False

    def connection_lost(self, exc):
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.complete and self.parser is not None:
            if self.started:
                self._fail(BackendError("reset", "backend closed the connection mid-response", True))
            else:
                self._fail(BackendError("reset", "backend closed the connection before answering", False))

    # httptools callbacks
    def on_header(self, name, value):
        self.headers[name.decode("latin-1").lower()] = value

    def on_headers_complete(self):
        self.status = self.parser.get_status_code()
        w = self._head_waiter
        if w is not None and not w.done():
            w.set_result(None)

    def on_body(self, body):
        if self._sink is not None:
            self._sink(body)
        else:
            self._chunks.append(body)

    def on_message_complete(self):
        self.complete = True
        self.reusable = self.parser.should_keep_alive()
        self.parser = None
        self._deadline = None
        w = self._done_waiter
        if w is not None and not w.done():
            w.set_result(None)

    # failure plumbing
    def _fail(self, err: BackendError):
        if self.error is None:
            self.error = err
        for w in (self._head_waiter, self._done_waiter):
            if w is not None and not w.done():
                w.set_exception(err)

    # Timeouts. Every leg arms a deadline two or three times, and almost every leg finishes long before it:
    # creating and cancelling a loop timer each time cost more than the rest of the timeout logic. So arming
    # only moves self._deadline; the connection keeps at most one timer, which is replaced only when the new
    # deadline is earlier than the timer, and which re-schedules itself when it fires before the deadline.
    def _on_timer(self):
        self._timer = None
        deadline = self._deadline
        if deadline is None or self.closed:
            return
        if self.loop.time() < deadline:
            self._timer_at = deadline
            self._timer = self.loop.call_at(deadline, self._on_timer)
            return
        self._deadline = None
        self._fail(BackendError("timeout", f"no {self._what} from backend within {self._seconds:g}s",
                                self.started))
        self.closed = True
        self.transport.abort()

    def arm(self, seconds: float, what: str):
        deadline = self.loop.time() + seconds
        self._deadline = deadline
        self._what = what
        self._seconds = seconds
        timer = self._timer
        if timer is None:
            self._timer_at = deadline
            self._timer = self.loop.call_at(deadline, self._on_timer)
        elif deadline < self._timer_at:
            timer.cancel()
            self._timer_at = deadline
            self._timer = self.loop.call_at(deadline, self._on_timer)

    def disarm(self):
        self._deadline = None  # a pending timer finds nothing to do when it fires

    # the exchange
    def send(self, data: bytes, first_byte_timeout: float):
        self._new_exchange()
        self.parser = httptools.HttpResponseParser(self)
        self.transport.write(data)
        self.arm(first_byte_timeout, "response")

    def read_head(self):
        """Awaitable: done once the answer's head has come (status and headers are set); raises the
        exchange's BackendError."""
        if self.status == 0:
            if self.error is not None:
                raise self.error
            self._head_waiter = waiter = self.loop.create_future()
            return waiter
        return DONE

    async def read_body(self, timeout: float) -> bytes:
        if not self.complete:
            if self.error is not None:
                raise self.error
            self.arm(timeout, "complete body")
            self._done_waiter = self.loop.create_future()
            await self._done_waiter
        chunks = self._chunks
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def attach_sink(self, sink, after_feed=None):
        """Deliver body bytes to sink(data) from now on (buffered ones first), and call after_feed() once
        after each network read has been fed to sink. Returns a future for the end."""
        chunks, self._chunks = self._chunks, []
        for c in chunks:
            sink(c)
        self._sink = sink
        self._after_feed = after_feed
        fut = self.loop.create_future()
        if self.complete:
            fut.set_result(None)
        elif self.error is not None:
            fut.set_exception(self.error)
        else:
            self._done_waiter = fut
        return fut

    def pause_reading(self):
        """Stop reading the backend's socket (its client cannot take more now)."""
        self.transport.pause_reading()

    def resume_reading(self):
        self.transport.resume_reading()

    def close(self):
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


async def open_connection(loop, host: str, port: int, timeout: float) -> ClientConnection:
    try:
        async with asyncio.timeout(timeout):
            _, conn = await loop.create_connection(lambda: ClientConnection(loop), host, port)
    except TimeoutError:
        raise BackendError("connect", f"connect to {host}:{port} timed out after {timeout:g}s") from None
    except OSError as exc:
        raise BackendError("connect", f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
    return conn


def build_post(path: bytes, host_header: bytes, body: bytes, request_id: bytes, auth: bytes | None) -> bytes:
    """A PD leg's JSON POST with its X-Request-Id and, when given, Authorization: the bytes build_request makes
    for it, in one formatting step."""
    if auth:
        return (b"POST %b HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                b"X-Request-Id: %b\r\nAuthorization: %b\r\n\r\n%b"
                % (path, host_header, len(body), request_id, auth, body))
    return (b"POST %b HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"X-Request-Id: %b\r\n\r\n%b" % (path, host_header, len(body), request_id, body))


def build_request(method: bytes, path: bytes, host_header: bytes, body: bytes, extra: list) -> bytes:
    parts = [method, b" ", path, b" HTTP/1.1\r\nHost: ", host_header, b"\r\n"]
    if body or method == b"POST":
        parts.append(b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body))
    for name, value in extra:
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"\r\n")
    parts.append(body)
    return b"".join(parts)


async def http_get(backend, path: str, timeout: float) -> tuple[int, bytes]:
    """One GET to an instance on a connection of its own (health checks, /kv_event_sources): status and body.
    Raises BackendError."""
    conn = await open_connection(asyncio.get_running_loop(), backend.host, backend.port, timeout)
    try:
        conn.send(build_request(b"GET", path.encode(), backend.host_header, b"", [(b"Connection", b"close")]),
                  timeout)
        await conn.read_head()
        body = await conn.read_body(timeout)
        return conn.status, body
    finally:
        conn.close()
