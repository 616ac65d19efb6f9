"""Writing answers on a client connection: a whole answer with Content-Length, or a chunked stream whose head
leaves with its first chunk and whose end leaves with its last."""

from __future__ import annotations

from http import HTTPStatus

from .errors import error_body

_STATUS_LINES = {s.value: b"HTTP/1.1 %d %b\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return line if line is not None else b"HTTP/1.1 %d Unknown\r\n" % status


class ResponseWriter:
    """The writing half of ServerConnection (http_server.py). Uses its transport and closed; start_answer
    resets, per request, responded, streaming, status_sent, keep_alive (the connection stays open after this
    answer) and the stream head not sent yet."""

    def start_answer(self, keep_alive: bool):
        """A new request is being answered: nothing of its answer has been written."""
        self.responded = False
        self.streaming = False
        self.keep_alive = keep_alive
        self.status_sent = 0
        self._stream_head = b""  # a stream's head, sent with its first chunk (one write, not two)

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
