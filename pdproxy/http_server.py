"""Client-facing HTTP/1.1 server: an asyncio Protocol on httptools, keep-alive, one request at a time per connection."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from http import HTTPStatus

import httptools

from .tcp import set_nodelay

log = logging.getLogger("pdproxy.http")

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


def status_line(status: int) -> bytes:
    return b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))


class Request:
    __slots__ = ("method", "path", "query", "headers", "body", "client_ip", "keep_alive", "t0", "too_large")

    def __init__(self, method, path, query, headers, body, client_ip, keep_alive, too_large):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers  # lower-cased str -> str
        self.body = body
        self.client_ip = client_ip
        self.keep_alive = keep_alive
        self.too_large = too_large
        self.t0 = time.perf_counter()


class ServerConnection(asyncio.Protocol):
    """One client connection. The app's handler writes through send_response / start_stream / send_chunk."""

    def __init__(self, app, max_body_bytes: int):
        self.app = app
        self.max_body = max_body_bytes
        self.loop = asyncio.get_running_loop()
        self.transport = None
        self.parser = httptools.HttpRequestParser(self)
        self.client_ip = ""
        self.closed = False
        self.busy = False
        self.queue: deque[Request] = deque()
        self.current_task = None
        # set by the handler for the request being answered
        self.responded = False
        self.streaming = False
        self.keep_alive = True
        self.status_sent = 0
        self._stream_head = b""  # a stream's head, sent with its first chunk (one write, not two)
        # backpressure: callbacks to run when the client drains
        self.write_paused = False
        self._on_resume: list = []
        self._on_close: list = []
        self._reset_message()

    def _reset_message(self):
        self._url = b""
        self._headers = {}
        self._body = []
        self._size = 0
        self._too_large = False

    # asyncio.Protocol
    def connection_made(self, transport):
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client_ip = peer[0] if peer else ""
        set_nodelay(transport)

    def data_received(self, data):
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fatal(400, "protocol upgrade is not supported")
        except httptools.HttpParserError as exc:
            self._fatal(400, f"malformed HTTP request: {exc}")

    def connection_lost(self, exc):
        self.closed = True
        if self.current_task is not None:
            self.current_task.cancel()  # the client is gone: stop its backend legs too
        callbacks, self._on_close = self._on_close, []
        for cb in callbacks:
            cb()
        callbacks, self._on_resume = self._on_resume, []
        for cb in callbacks:
            cb()

    def pause_writing(self):
        self.write_paused = True

    def resume_writing(self):
        self.write_paused = False
        callbacks, self._on_resume = self._on_resume, []
        for cb in callbacks:
            cb()

    def on_resume(self, cb):
        self._on_resume.append(cb)

    def on_close(self, cb):
        self._on_close.append(cb)

    # httptools callbacks
    def on_message_begin(self):
        self._reset_message()

    def on_url(self, url):
        self._url += url

    def on_header(self, name, value):
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self):
        length = self._headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            self._too_large = True

    def on_body(self, body):
        if self._too_large:
            return
        self._size += len(body)
        if self._size > self.max_body:
            self._too_large = True
            self._body = []
        else:
            self._body.append(body)

    def on_message_complete(self):
        url = httptools.parse_url(self._url)
        path = url.path.decode("latin-1")
        query = url.query.decode("latin-1") if url.query else ""
        body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        req = Request(self.parser.get_method().decode(), path, query, self._headers, body,
                      self.client_ip, self.parser.should_keep_alive(), self._too_large)
        self._reset_message()
        if self.busy:
            self.queue.append(req)
        else:
            self._start(req)

    # request lifecycle
    def _start(self, req: Request):
        self.busy = True
        self.responded = False
        self.streaming = False
        self.status_sent = 0
        self._stream_head = b""
        self.keep_alive = req.keep_alive
        self.current_task = self.loop.create_task(self._run(req))

    async def _run(self, req: Request):
        try:
            await self.app.handle(req, self)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # never a traceback to the client
            log.exception("handler failed for %s %s", req.method, req.path)
            if not self.responded:
                self.send_error(500, f"internal proxy error: {type(exc).__name__}", "InternalServerError")
            elif self.streaming:
                self.end_stream()
        self._finish()

    def _finish(self):
        self.busy = False
        self.current_task = None
        if self.closed:
            return
        if not self.responded:
            self.send_error(500, "internal proxy error: no response", "InternalServerError")
        if not self.keep_alive:
            self.transport.close()
            self.closed = True
            return
        if self.queue:
            self._start(self.queue.popleft())

    def _fatal(self, status: int, message: str):
        if not self.closed and not self.busy:
            self.keep_alive = False
            self.send_error(status, message, "BadRequestError")
        if self.transport is not None:
            self.transport.close()
        self.closed = True

    # writing
    def _head(self, status: int, content_type: bytes, extra: list | tuple, length: int | None) -> bytes:
        parts = [status_line(status), b"Content-Type: ", content_type, b"\r\n"]
        if length is None:
            parts.append(b"Transfer-Encoding: chunked\r\n")
        else:
            parts.append(b"Content-Length: %d\r\n" % length)
        for name, value in extra:
            parts += (name, b": ", value, b"\r\n")
        if not self.keep_alive:
            parts.append(b"Connection: close\r\n")
        parts.append(b"\r\n")
        return b"".join(parts)

    def send_response(self, status: int, body: bytes, content_type: bytes = b"application/json", extra=()):
        if self.responded or self.closed:
            return
        self.responded = True
        self.status_sent = status
        self.transport.write(self._head(status, content_type, extra, len(body)) + body)

    def send_error(self, status: int, message: str, err_type: str, extra=()):
        from .errors import error_body

        self.send_response(status, error_body(status, message, err_type), extra=extra)

    def start_stream(self, status: int, content_type: bytes, extra=()):
        """Begin a chunked answer. Its head leaves with the first chunk (or with the end of the stream)."""
        self.responded = True
        self.streaming = True
        self.status_sent = status
        if not self.closed:
            self._stream_head = self._head(status, content_type, extra, None)

    def send_chunk(self, data: bytes):
        if data and not self.closed:
            head, self._stream_head = self._stream_head, b""
            self.transport.write(b"%b%x\r\n%b\r\n" % (head, len(data), data))

    def end_stream(self, data: bytes = b""):
        """End the chunked answer, with `data` as its last chunk: head (if still unsent), data and the
        terminating chunk go in one write."""
        if self.streaming and not self.closed:
            head, self._stream_head = self._stream_head, b""
            if data:
                self.transport.write(b"%b%x\r\n%b\r\n0\r\n\r\n" % (head, len(data), data))
            else:
                self.transport.write(head + b"0\r\n\r\n")
        self.streaming = False


async def serve(app, host: str, port: int, max_body_bytes: int, backlog: int = 2048):
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: ServerConnection(app, max_body_bytes), host, port,
                                    backlog=backlog, reuse_address=True)
