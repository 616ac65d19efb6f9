"""Client-facing HTTP/1.1 server: an asyncio Protocol on httptools, keep-alive, one request at a time per
connection, and caps on what one client can make it hold (RequestCaps)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque

import httptools

from .http_request import Request, RequestReader
from .http_response import ResponseWriter
from .limits import RequestCaps
from .tcp import set_nodelay

log = logging.getLogger("pdproxy.http")

_ERROR_TYPES = {413: "RequestTooLargeError", 414: "URITooLongError", 431: "RequestHeaderFieldsTooLargeError"}
_FEED_SLICE = 16 * 1024  # parsed at a time: how far a pipelining client's requests get ahead of their answers
DEFAULT_CAPS = RequestCaps()
_LINGER_S = 2.0  # after a refusal, what the client still sends is read and dropped this long (see _refuse_now)


class ServerConnection(RequestReader, ResponseWriter, asyncio.Protocol):
    """One client connection. The app's handler writes through send_response / start_stream / send_chunk
    (ResponseWriter, http_response.py); httptools calls RequestReader's callbacks (http_request.py).

    While a request is answered nothing more is parsed, and once more bytes arrive the socket is not read
    either: a pipelining client's requests wait in the kernel, not here (see data_received)."""

    def __init__(self, app, caps: RequestCaps = DEFAULT_CAPS):
        self.app = app
        self.max_body = caps.max_body_bytes
        self._max_url = caps.max_url_bytes
        self._max_headers = caps.max_header_count
        self._max_header_bytes = caps.max_header_bytes
        self._max_header_line = caps.max_header_line_bytes
        self.loop = asyncio.get_running_loop()
        self.transport = None
        self.parser = httptools.HttpRequestParser(self)
        self.client_ip = ""
        self.closed = False
        self.busy = False
        self.queue: deque = deque()  # Requests, or a refusal (status, message), parsed while one is answered
        self._unparsed = b""  # read while a request is answered; parsed once it is done
        self._reading = True
        self._refusal = None  # (status, message) set by a parser callback that stopped the parser
        self._refused = False  # a request was refused: nothing more is parsed, the connection ends after it
        self._in_message = False  # between a request's first byte and its end
        self._body_seen = False  # body bytes came in the current feed
        # httptools hands a header (or trailer) over only once it is complete; until then it grows inside the
        # parser. Feeds that end inside a request without body bytes count against this (the first may also
        # hold the end of the request before).
        self._max_idle_fed = caps.max_url_bytes + caps.max_header_bytes + _FEED_SLICE + 1024
        self.current_task = None
        self.start_answer(keep_alive=True)
        # backpressure: callbacks to run when the client drains
        self.write_paused = False
        self._on_resume: list = []
        self._on_close: list = []
        self._reset_message()

    # asyncio.Protocol
    def connection_made(self, transport):
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client_ip = peer[0] if peer else ""
        set_nodelay(transport)

    def data_received(self, data):
        if self.busy or self._refused or len(data) > _FEED_SLICE:
            self._feed(data)
        else:
            self._parse(data)

    def _feed(self, data):
        """Parse `data` a slice at a time; once a request is being answered, the rest waits unparsed."""
        if self._refused:
            return  # lingering after a refusal: dropped
        if self.busy:
            # Pipelined bytes while a request is answered: keep this one read and stop reading until it is done.
            self._unparsed += data
            self._pause_reading()
            return
        view = memoryview(data)
        for start in range(0, len(data), _FEED_SLICE):
            if self._refused:
                return
            if self.busy:
                self._unparsed = bytes(view[start:])
                self._pause_reading()
                return
            self._parse(view[start:start + _FEED_SLICE])

    def _parse(self, data):
        self._body_seen = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrade is not supported")
            return
        except httptools.HttpParserError as exc:
            refusal, self._refusal = self._refusal, None
            self._refuse(*(refusal or (400, f"malformed HTTP request: {exc}")))
            return
        if self._in_message:
            if self._body_seen:
                self._idle_fed = 0
                return
            self._idle_fed += len(data)
            if self._idle_fed > self._max_idle_fed:
                self._refuse(431, f"request headers are over {self._max_header_bytes} bytes (--max-header-bytes)")


    def _pause_reading(self):
        if self._reading:
            self._reading = False
            self.transport.pause_reading()

    def _resume_reading(self):
        if not self._reading and not self.closed:
            self._reading = True
            self.transport.resume_reading()

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

    def request_parsed(self, req: Request):
        if self.busy:
            self.queue.append(req)
        else:
            self._start(req)

    # request lifecycle
    def _start(self, req: Request):
        self.busy = True
        self.start_answer(req.keep_alive)
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
            item = self.queue.popleft()
            if isinstance(item, Request):
                self._start(item)
            else:
                self._refuse_now(*item)
            return
        if self._unparsed:
            data, self._unparsed = self._unparsed, b""
            self._feed(data)
        if not self._reading and not self.busy and not self._refused:
            self._resume_reading()

    # refusals: answered in their turn, then the connection ends
    def _refuse(self, status: int, message: str):
        self._refused = True
        self._unparsed = b""
        if self.busy:
            self.queue.append((status, message))
        else:
            self._refuse_now(status, message)

    def _refuse_now(self, status: int, message: str):
        if self.closed:
            return
        if self.app is not None:
            self.app.refused(status)
        self.responded = False
        self.keep_alive = False
        self.send_error(status, message, _ERROR_TYPES.get(status, "BadRequestError"))
        # Half-close and drop what the client still sends for a moment before closing: closing with its bytes
        # unread makes the kernel send a reset, which can destroy the answer before the client reads it.
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._resume_reading()
        self.loop.call_later(_LINGER_S, self.transport.close)



async def serve(app, host: str, port: int, caps: RequestCaps, backlog: int = 2048, reuse_port: bool = False):
    """Listen for `app`: an object with `async handle(request, connection)` and `refused(status)`."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: ServerConnection(app, caps), host, port,
                                    backlog=backlog, reuse_address=True, reuse_port=reuse_port or None)
