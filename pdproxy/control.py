"""The supervisor's channel to each worker (supervisor.py, worker_link.py): length-prefixed JSON messages over a
Unix socket pair, in both directions, and calls that wait for the other side's reply."""

from __future__ import annotations

import asyncio
import itertools
import json
import struct

from .errors import error_body

HEADER = struct.Struct(">I")
MAX_MESSAGE = 256 * 1024 * 1024  # a metrics snapshot of a very large mesh stays far below this


class ChannelClosed(ConnectionError):
    """The other side is gone (it exited, or closed the channel)."""


class Channel:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.closed = False
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}

    @classmethod
    async def open(cls, sock) -> Channel:
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=MAX_MESSAGE)
        return cls(reader, writer)

    def send(self, message: dict) -> None:
        if self.closed:
            return
        data = json.dumps(message, separators=(",", ":")).encode()
        self.writer.write(HEADER.pack(len(data)) + data)

    async def receive(self) -> dict:
        """The next message that is not a reply to one of our calls (those resolve their call)."""
        while True:
            try:
                head = await self.reader.readexactly(HEADER.size)
                (size,) = HEADER.unpack(head)
                if size > MAX_MESSAGE:
                    raise ChannelClosed(f"control message of {size} bytes is over {MAX_MESSAGE}")
                message = json.loads(await self.reader.readexactly(size))
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                self._close()
                raise ChannelClosed(str(exc) or "channel closed") from None
            if message.get("op") == "reply":
                waiter = self._waiting.pop(message.get("id"), None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(message)
                continue
            return message

    async def call(self, message: dict, timeout: float) -> dict:
        """Send `message` and wait for the reply the other side sends with reply(message, ...)."""
        if self.closed:
            raise ChannelClosed("channel closed")
        call_id = next(self._ids)
        waiter = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = waiter
        self.send({**message, "id": call_id})
        try:
            return await asyncio.wait_for(waiter, timeout)
        finally:
            self._waiting.pop(call_id, None)

    def reply(self, request: dict, **fields) -> None:
        self.send({"op": "reply", "id": request.get("id"), **fields})

    def _close(self):
        self.closed = True
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(ChannelClosed("channel closed"))
        self._waiting.clear()

    def close(self):
        self._close()
        self.writer.close()


class CapturedAnswer:
    """Stands for a client connection while a request is answered for another process: keeps what would have been
    sent, to travel over the channel (fields) and be sent there."""

    def __init__(self):
        self.status = 500
        self.body = b""
        self.content_type = b"application/json"
        self.extra = []
        self.responded = False

    @property
    def status_sent(self) -> int:
        return self.status if self.responded else 0

    def send_response(self, status: int, body: bytes, content_type: bytes = b"application/json", extra=()):
        if self.responded:
            return
        self.responded = True
        self.status, self.body, self.content_type, self.extra = status, body, content_type, list(extra)

    def send_error(self, status: int, message: str, err_type: str, extra=()):
        self.send_response(status, error_body(status, message, err_type), extra=extra)

    def fields(self) -> dict:
        return {"status": self.status, "body": self.body.decode("latin-1"),
                "content_type": self.content_type.decode(),
                "headers": [[k.decode(), v.decode()] for k, v in self.extra]}
