"""A small, fast fake vLLM PD backend (one process) that can be told to fail; used by the tests and the bench.

Plays Prefill or Decode by what the request says (kv_transfer_params). Control endpoints:
  POST /_fault {"mode": ..., "legs": ["prefill","decode"], "times": K, "n": N, "seconds": S, "health": ...}
     modes: ok | 500 | 400 | garbage | garbage_json | hang | cut_after (n events) | slow_first_byte (seconds)
            | partial_kv (a Prefill's kv_transfer_params without remote_*)
            | close_port | recompute_after (n tokens)
            | slow_end (seconds between [DONE] and the end of the stream)
            | 400_slow_body (the 400's head, its body `seconds` later, as uvicorn writes them apart)
            | 400_cut_body (the 400's head, then the connection closes before its body)
            | 500_slow_body (a 500's head, its body `seconds` later)
     health: ok | fail | slow (/health answers after health_seconds, as a busy engine's may)
  GET /_stats   -> {"counts": {...}, "requests": [records]}      POST /_reset -> clear records
Prints "PORT <n>" once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import httptools

MODEL = "fake-model"


class State:
    def __init__(self, name: str, chunks: int, record: bool, token_delay: float):
        self.name = name
        self.chunks = chunks
        self.record = record
        self.token_delay = token_delay
        self.fault = {"mode": "ok"}
        self.records: list[dict] = []
        self.counts = {"prefill": 0, "decode": 0, "other": 0}
        self.server = None
        self.conns: set = set()
        self.port = 0

    def take_fault(self, leg: str) -> dict:
        f = self.fault
        if f.get("mode", "ok") == "ok":
            return f
        legs = f.get("legs")
        if legs and leg not in legs:
            return {"mode": "ok"}
        if "times" in f:
            f["times"] -= 1
            if f["times"] < 0:
                self.fault = {"mode": "ok", "health": f.get("health", "ok")}
                return self.fault
        return f


def _head(status: int, ctype: bytes, length: int | None, extra: bytes = b"") -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 500: b"Internal Server Error",
              503: b"Service Unavailable"}.get(status, b"X")
    te = b"Transfer-Encoding: chunked\r\n" if length is None else b"Content-Length: %d\r\n" % length
    return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s%s\r\n" % (status, reason, ctype, te, extra)


def _err(status: int, message: str, typ: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": typ, "param": None, "code": status}}).encode()


class Conn(asyncio.Protocol):
    def __init__(self, st: State):
        self.st = st
        self.parser = httptools.HttpRequestParser(self)
        self.transport = None
        self.queue: list = []
        self.busy = False

    def connection_made(self, transport):
        self.transport = transport
        self.st.conns.add(self)

    def connection_lost(self, exc):
        self.st.conns.discard(self)

    def data_received(self, data):
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_message_begin(self):
        self.url = b""
        self.headers = {}
        self.body = []

    def on_url(self, url):
        self.url += url

    def on_header(self, name, value):
        self.headers[name.decode().lower()] = value.decode()

    def on_body(self, body):
        self.body.append(body)

    def on_message_complete(self):
        req = (self.parser.get_method(), self.url.decode(), self.headers, b"".join(self.body))
        self.queue.append(req)
        if not self.busy:
            self.busy = True
            asyncio.get_running_loop().create_task(self.serve_queue())

    async def serve_queue(self):
        while self.queue:
            await self.handle(*self.queue.pop(0))
            if self.transport.is_closing():
                return
        self.busy = False

    def send(self, status: int, body: bytes, ctype: bytes = b"application/json"):
        self.transport.write(_head(status, ctype, len(body)) + body)

    async def handle(self, method, url, headers, raw):
        path = url.split("?")[0]
        if path == "/health" and self.st.fault.get("health") == "slow":  # a busy engine's late answer
            await asyncio.sleep(float(self.st.fault.get("health_seconds", 1.0)))
        if path in ("/health", "/v1/models", "/_fault", "/_stats", "/_reset"):
            return self.control(path, raw)
        if path not in ("/v1/completions", "/v1/chat/completions"):
            return self.send(404, _err(404, f"no route {path}", "NotFoundError"))
        try:
            body = json.loads(raw)
        except ValueError:
            return self.send(400, _err(400, "bad json", "BadRequestError"))
        st = self.st
        kv = body.get("kv_transfer_params") or {}
        leg = "prefill" if kv.get("do_remote_decode") else ("decode" if kv.get("do_remote_prefill") else "other")
        st.counts[leg] += 1
        rid = headers.get("x-request-id", "")
        if st.record:
            st.records.append({"leg": leg, "path": path, "request_id": rid, "kv_transfer_params": kv,
                               "stream": body.get("stream"), "max_tokens": body.get("max_tokens"),
                               "min_tokens": body.get("min_tokens"),
                               "max_completion_tokens": body.get("max_completion_tokens"),
                               "has_stream_options": "stream_options" in body,
                               "prompt": body.get("prompt"), "messages": body.get("messages"),
                               "t": time.time()})
        fault = st.take_fault(leg)
        if fault.get("mode", "ok") != "ok" and await self.injected(fault):
            return
        if body.get("model") != MODEL:
            return self.send(404, _err(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError"))
        prompt = body.get("prompt") if "prompt" in body else " ".join(
            str(m.get("content", "")) for m in body.get("messages") or [])
        prompt_tokens = len(str(prompt).split())
        if leg == "prefill":
            return self.prefill_answer(rid, prompt_tokens)
        if leg != "decode":
            return self.send(400, _err(400, "decode leg without kv_transfer_params from a prefill",
                                       "BadRequestError"))
        n = body.get("max_tokens") or body.get("max_completion_tokens") or st.chunks
        n = min(int(n), st.chunks)
        chat = path.endswith("chat/completions")
        if not body.get("stream"):
            return self.whole_answer(rid, chat, n, prompt_tokens, fault)
        await self.stream_answer(rid, chat, n, fault)

    def control(self, path: str, raw: bytes):
        st = self.st
        if path == "/health":
            if st.fault.get("health", "ok") == "fail":
                return self.send(503, b'{"status":"unhealthy"}')
            return self.send(200, b"")
        if path == "/v1/models":
            return self.send(200, json.dumps({"object": "list", "data": [
                {"id": MODEL, "object": "model", "owned_by": "vllm", "root": MODEL}]}).encode())
        if path == "/_fault":
            st.fault = json.loads(raw or b"{}")
            return self.send(200, b"{}")
        if path == "/_stats":
            return self.send(200, json.dumps({"name": st.name, "counts": st.counts,
                                              "requests": st.records}).encode())
        st.records.clear()  # /_reset
        st.counts = {"prefill": 0, "decode": 0, "other": 0}
        st.fault = {"mode": "ok"}
        return self.send(200, b"{}")

    async def injected(self, fault: dict) -> bool:
        """Play the fault's mode; True when that was the whole answer (or no answer at all)."""
        mode = fault.get("mode", "ok")
        if mode == "close_port":
            if self.st.server is not None:
                self.st.server.close()
            for c in list(self.st.conns):
                c.transport.abort()
            return True
        if mode == "hang":
            await asyncio.sleep(3600)
            return True
        if mode == "500":
            self.send(500, _err(500, "injected failure", "InternalServerError"))
            return True
        if mode == "400":
            self.send(400, _err(400, "injected bad request", "BadRequestError"))
            return True
        if mode in ("400_slow_body", "400_cut_body", "500_slow_body"):
            status = int(mode[:3])
            body = (_err(400, "injected bad request", "BadRequestError") if status == 400
                    else _err(500, "injected failure", "InternalServerError"))
            self.transport.write(_head(status, b"application/json", len(body)))
            if mode == "400_cut_body":
                self.transport.close()
                return True
            await asyncio.sleep(float(fault.get("seconds", 1.0)))
            self.transport.write(body)
            return True
        if mode == "garbage":
            self.transport.write(b"this is not HTTP\r\n\r\n\x00\x01garbage")
            self.transport.close()
            return True
        if mode == "garbage_json":
            self.send(200, b"{not json at all")
            return True
        if mode == "partial_kv":  # a Prefill's answer that would send a Decode for KV without saying where
            self.send(200, json.dumps({"choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
                                       "kv_transfer_params": {"do_remote_prefill": True}}).encode())
            return True
        if mode == "slow_first_byte":
            await asyncio.sleep(float(fault.get("seconds", 1.0)))
        return False

    def prefill_answer(self, rid: str, prompt_tokens: int):
        st = self.st
        out = {"id": f"cmpl-{rid}", "object": "text_completion", "model": MODEL,
               "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
               "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1},
               "kv_transfer_params": {"do_remote_prefill": True, "do_remote_decode": False,
                                      "remote_engine_id": st.name, "remote_block_ids": [1, 2, 3],
                                      "remote_host": "127.0.0.1", "remote_port": st.port,
                                      "remote_request_id": rid}}
        return self.send(200, json.dumps(out).encode())

    def whole_answer(self, rid: str, chat: bool, n: int, prompt_tokens: int, fault: dict):
        toks = [f"t{i} " for i in range(n)]
        at = int(fault["n"]) if fault.get("mode") == "recompute_after" else -1
        if at >= 0:
            text, finish, stop, ntok = "".join(toks[:at]), "stop", "recomputed", at
        else:
            text, finish, stop, ntok = "".join(toks), "length", None, n
        ch = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
               "stop_reason": stop} if chat else
              {"index": 0, "text": text, "finish_reason": finish, "stop_reason": stop})
        out = {"id": f"cmpl-{rid}", "object": "chat.completion" if chat else "text_completion",
               "model": MODEL, "choices": [ch], "served_by": self.st.name,
               "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": ntok,
                         "total_tokens": prompt_tokens + ntok}}
        return self.send(200, json.dumps(out).encode())

    async def stream_answer(self, rid: str, chat: bool, n: int, fault: dict):
        st = self.st
        mode = fault.get("mode")
        recompute_at = int(fault["n"]) if mode == "recompute_after" else -1
        cut_at = int(fault["n"]) if mode == "cut_after" else -1
        w = self.transport.write
        w(_head(200, b"text/event-stream", None, b"X-Served-By: %s\r\n" % st.name.encode()))
        for i in range(n):
            if i == cut_at:
                self.transport.abort()
                return
            tok, stop, finish = f"t{i} ", None, "length" if i == n - 1 else None
            if i == recompute_at:
                tok, finish, stop = "", "stop", "recomputed"
            ch = ({"index": 0, "delta": {"content": tok}, "finish_reason": finish, "stop_reason": stop} if chat
                  else {"index": 0, "text": tok, "finish_reason": finish, "stop_reason": stop})
            ev = b"data: %s\n\n" % json.dumps({"id": f"cmpl-{rid}", "object": "chat.completion.chunk" if chat
                                                else "text_completion", "model": MODEL, "seq": i,
                                                "choices": [ch]}).encode()
            w(b"%x\r\n%s\r\n" % (len(ev), ev))
            if st.token_delay:
                await asyncio.sleep(st.token_delay)
            if stop == "recomputed":
                break
        if mode == "slow_end":  # the last event now, the end of the stream `seconds` later
            w(b"e\r\ndata: [DONE]\n\n\r\n")
            await asyncio.sleep(float(fault.get("seconds", 1.0)))
            w(b"0\r\n\r\n")
            return
        w(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")


async def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--name", default="fake")
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--token-delay", type=float, default=0.0)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args(argv)
    st = State(args.name, args.chunks, not args.no_record, args.token_delay)
    loop = asyncio.get_running_loop()
    st.server = await loop.create_server(lambda: Conn(st), args.host, args.port, backlog=1024)
    st.port = st.server.sockets[0].getsockname()[1]
    print(f"PORT {st.port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
