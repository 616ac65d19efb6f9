"""Reading requests off a client connection: httptools' callbacks, the Request they make, and the RequestCaps
checks that stop a request before it can make the proxy hold more than a cap allows."""

from __future__ import annotations

import time

import httptools


class _Refused(Exception):
    """Raised in a parser callback to stop parsing; what to answer is in the connection's _refusal."""


class Request:
    __slots__ = ("method", "path", "query", "headers", "body", "client_ip", "keep_alive", "t0")

    def __init__(self, method, path, query, headers, body, client_ip, keep_alive):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers  # lower-cased str -> str
        self.body = body
        self.client_ip = client_ip
        self.keep_alive = keep_alive
        self.t0 = time.perf_counter()


class RequestReader:
    """The reading half of ServerConnection (http_server.py), as httptools' callbacks. Uses its parser, caps
    (_max_*), client_ip and _refusal; hands each complete request to request_parsed(request)."""

    def _reset_message(self):
        self._url = b""
        self._headers = {}
        self._body = []
        self._size = 0
        self._header_count = 0
        self._header_bytes = 0
        self._idle_fed = 0

    def _stop(self, status: int, message: str):
        self._refusal = (status, message)
        raise _Refused

    def on_message_begin(self):
        self._in_message = True
        self._reset_message()

    def on_url(self, url):
        self._url += url
        if len(self._url) > self._max_url:
            self._stop(414, f"the URL is over {self._max_url} bytes (--max-url-bytes)")

    def on_header(self, name, value):
        size = len(name) + len(value) + 4
        self._header_count += 1
        if size > self._max_header_line or self._header_count > self._max_headers:
            self._stop(431, self._headers_over(name, size))
        self._header_bytes += size
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def _headers_over(self, name: bytes, size: int) -> str:
        if self._header_count > self._max_headers:
            return f"more than {self._max_headers} request headers (--max-header-count)"
        if size > self._max_header_line:
            shown = name[:64].decode("latin-1")
            return f"request header {shown!r} is {size} bytes, over {self._max_header_line} (--max-header-line-bytes)"
        return f"request headers are over {self._max_header_bytes} bytes in all (--max-header-bytes)"

    def on_headers_complete(self):
        # the sum is checked once here, not per header: until now it was bounded by _max_idle_fed
        if self._header_bytes > self._max_header_bytes:
            self._stop(431, self._headers_over(b"", 0))
        length = self._headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            self._stop(413, self._too_large())

    def on_body(self, body):
        self._body_seen = True
        self._size += len(body)
        if self._size > self.max_body:
            self._stop(413, self._too_large())
        self._body.append(body)

    def _too_large(self) -> str:
        return f"request body exceeds the limit of {self.max_body} bytes (--max-body-bytes)"

    def on_message_complete(self):
        self._in_message = False
        url = httptools.parse_url(self._url)
        path = url.path.decode("latin-1")
        query = url.query.decode("latin-1") if url.query else ""
        body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        req = Request(self.parser.get_method().decode(), path, query, self._headers, body,
                      self.client_ip, self.parser.should_keep_alive())
        self._reset_message()
        self.request_parsed(req)
