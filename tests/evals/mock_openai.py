"""A tiny stdlib OpenAI-compatible server for driving the real ais_bench in tests and for recording fixtures.

Answers are scripted by the prompt itself, so a dataset file decides what is right and what is wrong:
  - a prompt containing `<<answer:X>>` gets "... The final answer is \\boxed{X}." (no marker: \\boxed{0}), one
    token per word, cut at max_tokens;
  - a prompt containing `<<fail>>` gets HTTP 500 (mode "ok"); mode "fail500" fails every completion request.
Serves GET /v1/models, POST /v1/chat/completions and /v1/completions, stream (SSE, with a usage chunk when
stream_options.include_usage) and non-stream (with usage). Binds 127.0.0.1, port 0 unless told.
Run alone: `python tests/evals/mock_openai.py [--mode ok|fail500] [--port N]` prints "PORT <n>".
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "mock-model"
ANSWER = re.compile(r"<<answer:([^>]*)>>")
FAIL = "<<fail>>"


def prompt_text(body: dict) -> str:
    if "messages" in body:
        return "\n".join(str(m.get("content", "")) for m in body["messages"])
    return str(body.get("prompt", ""))


def reply_for(prompt: str) -> str:
    found = ANSWER.search(prompt)
    return f"Let me think step by step. The final answer is \\boxed{{{found.group(1) if found else '0'}}}."


class MockOpenAI(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int = 0, mode: str = "ok", chunk_delay: float = 0.004):
        super().__init__(("127.0.0.1", port), Handler)
        self.mode = mode
        self.chunk_delay = chunk_delay
        self.requests: list[dict] = []
        self.lock = threading.Lock()

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> MockOpenAI:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # clients closing kept-alive connections
            super().handle_error(request, client_address)

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    server: MockOpenAI
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def send_json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        else:
            self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        with self.server.lock:
            self.server.requests.append({"path": self.path, "body": body})
        chat = self.path == "/v1/chat/completions"
        if not chat and self.path != "/v1/completions":
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        prompt = prompt_text(body)
        if self.server.mode == "fail500" or FAIL in prompt:
            self.send_json(500, {"error": {"message": "mock failure", "type": "server_error"}})
            return
        words = reply_for(prompt).split(" ")[:max(1, int(body.get("max_tokens") or 1 << 20))]
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(words),
                 "total_tokens": len(prompt.split()) + len(words)}
        if body.get("stream"):
            self.stream(chat, words, usage if (body.get("stream_options") or {}).get("include_usage") else None)
        elif chat:
            self.send_json(200, {"id": "cmpl-mock", "object": "chat.completion", "model": MODEL, "usage": usage,
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": " ".join(words)}}]})
        else:
            self.send_json(200, {"id": "cmpl-mock", "object": "text_completion", "model": MODEL, "usage": usage,
                                 "choices": [{"index": 0, "finish_reason": "stop", "text": " ".join(words)}]})

    def stream(self, chat: bool, words: list[str], usage: dict | None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i, word in enumerate(words):
            piece = word if i == 0 else " " + word
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            choice["finish_reason"] = "stop" if i == len(words) - 1 else None
            self.event({"id": "cmpl-mock", "model": MODEL, "choices": [choice]})
            time.sleep(self.server.chunk_delay)
        if usage:
            self.event({"id": "cmpl-mock", "model": MODEL, "choices": [], "usage": usage})
        self.chunk(b"data: [DONE]\n\n")
        self.chunk(b"")

    def event(self, payload: dict) -> None:
        self.chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

    def chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", choices=["ok", "fail500"], default="ok")
    parser.add_argument("--chunk-delay", type=float, default=0.004, help="seconds between stream chunks")
    args = parser.parse_args()
    server = MockOpenAI(args.port, args.mode, args.chunk_delay)
    print(f"PORT {server.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
