"""One playground request through the proxy: sent with its own X-Request-Id, the answer read as it streams, turned
into the events the page and the API show (meta, delta, done or error). Never raises: every failure is an `error`
event with a message an operator can act on."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp

from .request import PlaygroundRequest
from .snippets import curl_snippet, python_snippet
from .target import ProxyTarget
from .timing import RequestClock

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0  # silence between two pieces of the answer
TOTAL_TIMEOUT_S = 300.0
RAW_CAP_BYTES = 64 << 10  # of the raw response kept for the page


@dataclass
class PlaygroundResult:
    """What is left of a request once it ended: what the audit entry and the API answer are made of."""

    request_id: str
    kind: str
    status: str = "pending"  # ok | refused | unreachable | timeout | http_4xx | http_5xx | stream_broken | garbled
    http_status: int | None = None
    text: list[str] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    prefill: dict | None = None
    decode: dict | None = None
    retries: int | None = None
    figures: dict = field(default_factory=dict)
    message: str = ""


class _Capped:
    """The raw response bytes, kept up to a cap."""

    def __init__(self, cap: int = RAW_CAP_BYTES):
        self.parts: list[bytes] = []
        self.size = 0
        self.cap = cap
        self.cut = False

    def add(self, data: bytes) -> None:
        room = self.cap - self.size
        if room <= 0:
            self.cut = self.cut or bool(data)
            return
        self.parts.append(data[:room])
        self.size += min(room, len(data))
        self.cut = self.cut or len(data) > room

    def text(self) -> str:
        out = b"".join(self.parts).decode("utf-8", "replace")
        return out + (f"\n… (cut at {self.cap >> 10} KiB)" if self.cut else "")


def _choice_text(event: dict, chat: bool) -> tuple[str, str | None]:
    choices = event.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return "", None
    c = choices[0]
    if chat:
        part = c.get("delta") or c.get("message") or {}
        text = part.get("content") if isinstance(part, dict) else None
    else:
        text = c.get("text")
    return (text if isinstance(text, str) else ""), c.get("finish_reason")


def _error_message(raw: bytes) -> str:
    try:
        err = json.loads(raw).get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
    except (ValueError, AttributeError):
        pass
    return raw[:300].decode("utf-8", "replace").strip() or "(no body)"


class PlaygroundExchange:
    """events() yields (name, data) pairs; `result` holds the outcome once it has ended."""

    def __init__(self, target: ProxyTarget, preq: PlaygroundRequest, request_id: str, *,
                 total_timeout: float = TOTAL_TIMEOUT_S, read_timeout: float = READ_TIMEOUT_S):
        self.target, self.preq = target, preq
        self.body = preq.proxy_body(target.model)
        self.url = target.url + preq.endpoint
        self.result = PlaygroundResult(request_id=request_id, kind=preq.kind)
        self.raw = _Capped()
        self.clock = RequestClock()
        self.timeouts = aiohttp.ClientTimeout(total=total_timeout, sock_connect=CONNECT_TIMEOUT_S,
                                              sock_read=read_timeout)

    def request_view(self) -> dict:
        """The request as sent: proxy URL, body and the same request as curl and Python."""
        rid = self.result.request_id
        return {"url": self.url, "body": self.body, "curl": curl_snippet(self.url, self.body, rid),
                "python": python_snippet(self.url, self.body)}

    async def events(self) -> AsyncIterator[tuple[str, dict]]:
        result = self.result
        headers = {"Content-Type": "application/json", "X-Request-Id": result.request_id}
        self.clock = RequestClock()
        try:
            async with aiohttp.ClientSession(timeout=self.timeouts) as session, \
                    session.post(self.url, json=self.body, headers=headers) as resp:
                result.http_status = resp.status
                yield "meta", self._meta(resp.headers)
                if resp.status >= 400:
                    raw = await resp.content.read(RAW_CAP_BYTES)
                    self.raw.add(raw)
                    yield self._failed("http_4xx" if resp.status < 500 else "http_5xx",
                                       f"the proxy answered HTTP {resp.status}: {_error_message(raw)}")
                    return
                streamed = resp.headers.get("Content-Type", "").startswith("text/event-stream")
                pieces = self._stream(resp) if streamed else self._whole(resp)
                async for event in pieces:
                    yield event
                    if event[0] == "error":
                        return
        except TimeoutError:
            yield self._failed("timeout", f"no answer from the proxy at {self.target.url} within "
                               f"{self._which_timeout()}")
            return
        except aiohttp.ClientConnectorError as exc:
            yield self._failed("unreachable", f"the proxy at {self.target.url} could not be reached: "
                               f"{exc.os_error.strerror or exc.os_error}")
            return
        except aiohttp.ClientError as exc:
            yield self._failed("stream_broken", f"the connection to the proxy broke: {type(exc).__name__}: {exc}"
                               .rstrip(": "))
            return
        result.status = "ok"
        result.figures = self.clock.figures()
        yield "done", {"status": "ok", "http_status": result.http_status, **result.figures,
                       "tokens_in": result.prompt_tokens, "tokens_out": result.completion_tokens,
                       "finish_reason": result.finish_reason, "raw_response": self.raw.text()}

    def _which_timeout(self) -> str:
        if self.clock.first is None and self.clock.pieces == 0:
            return f"{self.timeouts.sock_read:g} s of silence (total limit {self.timeouts.total:g} s)"
        return f"the limits ({self.timeouts.sock_read:g} s between pieces, {self.timeouts.total:g} s in all)"

    def _meta(self, headers) -> dict:
        result, target = self.result, self.target
        p, d = target.served(headers.get("X-PD-Prefill")), target.served(headers.get("X-PD-Decode"))
        result.prefill = p.as_dict() if p else None
        result.decode = d.as_dict() if d else None
        retries = headers.get("X-PD-Retries", "")
        result.retries = int(retries) if retries.isdigit() else None
        return {"request_id": headers.get("X-Request-Id") or result.request_id, "http_status": result.http_status,
                "deployment": target.deployment_name, "kind": result.kind, "prefill": result.prefill,
                "decode": result.decode, "retries": result.retries, "request": self.request_view()}

    def _failed(self, status: str, message: str) -> tuple[str, dict]:
        result = self.result
        result.status, result.message = status, message
        result.figures = self.clock.figures()
        return "error", {"status": status, "message": message, "http_status": result.http_status,
                         "total_ms": result.figures["total_ms"], "raw_response": self.raw.text()}

    def _delta(self, text: str) -> tuple[str, dict]:
        self.clock.piece()
        self.result.text.append(text)
        return "delta", {"text": text}

    def _usage(self, event: dict) -> None:
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.result.prompt_tokens = usage.get("prompt_tokens", self.result.prompt_tokens)
            self.result.completion_tokens = usage.get("completion_tokens", self.result.completion_tokens)

    async def _stream(self, resp) -> AsyncIterator[tuple[str, dict]]:
        chat = self.preq.kind == "chat"
        pending = b""
        async for data in resp.content.iter_any():
            self.raw.add(data)
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    return
                try:
                    event = json.loads(payload)
                except ValueError:
                    yield self._failed("garbled", f"the proxy sent an event that is not JSON: {payload[:120]!r}")
                    return
                if not isinstance(event, dict):
                    continue
                if isinstance(event.get("error"), dict):
                    yield self._failed("stream_broken", "the answer broke off: "
                                       f"{event['error'].get('message') or 'no reason given'}")
                    return
                self._usage(event)
                text, finish = _choice_text(event, chat)
                if finish:
                    self.result.finish_reason = finish
                if text:
                    yield self._delta(text)
        if self.result.completion_tokens is None:
            self.result.completion_tokens = self.clock.pieces  # no usage event: one token per piece

    async def _whole(self, resp) -> AsyncIterator[tuple[str, dict]]:
        raw = await resp.read()
        self.raw.add(raw)
        try:
            event = json.loads(raw)
        except ValueError:
            yield self._failed("garbled", f"the proxy answered 200 with a body that is not JSON: {raw[:120]!r}")
            return
        if not isinstance(event, dict):
            yield self._failed("garbled", "the proxy answered 200 with JSON that is not an object")
            return
        self._usage(event)
        text, self.result.finish_reason = _choice_text(event, self.preq.kind == "chat")
        if text:
            yield self._delta(text)
