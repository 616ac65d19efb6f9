"""Simulated metrics endpoints for bench/topology/run.py, in a process of their own (its CPU is not the collector's).

Reads a plan from stdin: {"engines": [{"key", "role", "host"}], "proxy": host, "pool": host, "control": host}.
Every engine, the proxy and the pool get a listening socket (port chosen by the kernel) on their host, all on one
asyncio loop; one JSON line on stdout gives the ports. Then it serves HTTP/1.1 with keep-alive until stdin closes
(the bench died) or SIGTERM:
  engine /metrics  the recorded simcluster Prefill page (tests/telemetry/fixtures/engine-simcluster.txt), and with
                   `vllm` pages (the default) also the request histograms a vLLM v1 engine exports beside it;
                   every counter, bucket and sum moves on each scrape, a gauge stays unless set
  proxy /metrics   pdproxy's families (pdproxy/metrics.py) with a counter per Prefill->Decode pair, every pair
                   listed, 1 in `busy_share` of them moving each scrape
  pool /metrics    mooncake_master's (tests/telemetry/fixtures/mooncake-master-busy.txt), moving the same way
  any /health      200
  control GET /set?key=<engine key>&running=<n>  sets that engine's vllm:num_requests_running; answers the time
                   of the change (time.time()); GET /page?kind=vllm|simcluster switches every engine's page
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "telemetry" / "fixtures"
MOVING = re.compile(r"^[^#\s]*(_total|_count|_sum|_bucket)(\{|\s)")
# Histograms a vLLM v1 engine exports besides the simcluster page's (vllm/v1/metrics/loggers.py).
VLLM_EXTRA = ("vllm:inter_token_latency_seconds", "vllm:request_queue_time_seconds",
              "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
              "vllm:request_inference_time_seconds", "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
              "vllm:request_params_max_tokens", "vllm:iteration_tokens_total", "vllm:request_time_per_output_token_seconds")


def engine_page_lines(kind: str) -> list[str]:
    lines = (FIXTURES / "engine-simcluster.txt").read_text().splitlines()
    lines = [line for line in lines if not line.startswith("# ") or line.startswith(("# HELP", "# TYPE"))]
    if kind == "vllm":
        e2e = [line for line in lines if "vllm:e2e_request_latency_seconds" in line]
        for name in VLLM_EXTRA:
            lines += [line.replace("vllm:e2e_request_latency_seconds", name) for line in e2e]
    return lines


class Template:
    """A page whose counter values grow with every render: value * (1 + n/100) + n keeps buckets monotonic."""

    def __init__(self, lines: list[str]):
        self.parts = []
        for line in lines:
            if MOVING.match(line):
                head, value = line.rsplit(" ", 1)
                self.parts.append((head + " ", float(value)))
            else:
                self.parts.append((line, None))

    def render(self, n: int, gauges: dict[str, float] | None = None) -> bytes:
        out = []
        f = 1 + n / 100
        for head, base in self.parts:
            if base is not None:
                out.append(f"{head}{base * f + n:.1f}")
            elif gauges and head.startswith("vllm:num_requests_running"):
                out.append(f"{head.rsplit(' ', 1)[0]} {gauges['running']:.1f}")
            else:
                out.append(head)
        return ("\n".join(out) + "\n").encode()


class ProxyPage:
    def __init__(self, prefills: list[str], decodes: list[str], busy_share: int):
        self.pairs = [(p, d) for p in prefills for d in decodes]
        self.backends = [("prefill", b) for b in prefills] + [("decode", b) for b in decodes]
        self.requests = [1.0] * len(self.pairs)
        self.busy_share = busy_share
        self.n = 0

    def render(self) -> bytes:
        self.n += 1
        share = self.busy_share
        for i in range(self.n % share, len(self.pairs), share):
            self.requests[i] += 2.0
        total = sum(self.requests)
        out = ["# HELP pdproxy_requests_total Client requests answered, by endpoint and status code",
               "# TYPE pdproxy_requests_total counter",
               f'pdproxy_requests_total{{code="200",endpoint="/v1/completions"}} {total:.1f}',
               "# HELP pdproxy_time_to_first_token_seconds Request arrival to first Decode byte forwarded",
               "# TYPE pdproxy_time_to_first_token_seconds histogram",
               f'pdproxy_time_to_first_token_seconds_bucket{{endpoint="/v1/completions",le="+Inf"}} {total:.1f}',
               f'pdproxy_time_to_first_token_seconds_count{{endpoint="/v1/completions"}} {total:.1f}',
               f'pdproxy_time_to_first_token_seconds_sum{{endpoint="/v1/completions"}} {total * 0.21:.3f}',
               "# HELP pdproxy_backend_requests_total Legs sent to a backend, by outcome",
               "# TYPE pdproxy_backend_requests_total counter"]
        out += [f'pdproxy_backend_requests_total{{backend="{b}",outcome="ok",role="{r}"}} {self.n * 3.0:.1f}'
                for r, b in self.backends]
        for name in ("edge_requests", "edge_prompt_tokens"):
            scale = 1.0 if name == "edge_requests" else 1500.0
            out += [f"# HELP pdproxy_{name}_total per Prefill->Decode pair", f"# TYPE pdproxy_{name}_total counter"]
            out += [f'pdproxy_{name}_total{{decode="{d}",prefill="{p}"}} {v * scale:.1f}'
                    for (p, d), v in zip(self.pairs, self.requests, strict=True)]
        out += ["# HELP pdproxy_backend_inflight Requests in flight", "# TYPE pdproxy_backend_inflight gauge"]
        out += [f'pdproxy_backend_inflight{{backend="{b}",role="{r}"}} 2.0' for r, b in self.backends]
        out += ["# HELP pdproxy_backend_healthy 1 when it takes requests", "# TYPE pdproxy_backend_healthy gauge"]
        out += [f'pdproxy_backend_healthy{{backend="{b}",role="{r}"}} 1.0' for r, b in self.backends]
        out += ["# HELP pdproxy_backend_state 1 for its state", "# TYPE pdproxy_backend_state gauge"]
        for r, b in self.backends:
            out += [f'pdproxy_backend_state{{backend="{b}",role="{r}",state="{s}"}} {1.0 if s == "healthy" else 0.0}'
                    for s in ("healthy", "pending", "ejected", "draining")]
        return ("\n".join(out) + "\n").encode()


class Targets:
    def __init__(self, plan: dict):
        self.plan = plan
        self.kind = "vllm"
        self.pages = {kind: Template(engine_page_lines(kind)) for kind in ("vllm", "simcluster")}
        self.pool_page = Template((FIXTURES / "mooncake-master-busy.txt").read_text().splitlines())
        self.scrapes: dict[str, int] = {}
        self.running: dict[str, float] = {}
        self.ports: dict[str, int] = {}
        self.proxy: ProxyPage | None = None

    def body(self, key: str, path: str) -> tuple[int, bytes]:
        if not path.startswith("/metrics"):
            return 200, b"{}"
        n = self.scrapes[key] = self.scrapes.get(key, 0) + 1
        if key == "proxy":
            return 200, self.proxy.render()
        if key == "kv-pool":
            return 200, self.pool_page.render(n)
        return 200, self.pages[self.kind].render(n, {"running": self.running.get(key, 3.0)})

    def control(self, path: str) -> tuple[int, bytes]:
        url = urlsplit(path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/set" and q.get("key") in self.ports:
            self.running[q["key"]] = float(q["running"])
            return 200, json.dumps({"at": time.time()}).encode()
        if url.path == "/page" and q.get("kind") in self.pages:
            self.kind = q["kind"]
            return 200, b"{}"
        return 404, b"{}"

    async def serve(self, key: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                status, body = self.control(path) if key == "control" else self.body(key, path)
                writer.write(f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\n"
                             f"Content-Type: text/plain; version=0.0.4\r\nContent-Length: {len(body)}\r\n\r\n"
                             .encode() + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, IndexError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def listen(self, key: str, host: str) -> None:
        server = await asyncio.start_server(lambda r, w: self.serve(key, r, w), host, 0, backlog=64)
        self.ports[key] = server.sockets[0].getsockname()[1]

    async def main(self) -> None:
        for e in self.plan["engines"]:
            await self.listen(e["key"], e["host"])
        for key, host in (("proxy", self.plan["proxy"]), ("kv-pool", self.plan["pool"]),
                          ("control", self.plan["control"])):
            await self.listen(key, host)
        addr = {e["key"]: f"{e['host']}:{self.ports[e['key']]}" for e in self.plan["engines"]}
        self.proxy = ProxyPage([addr[e["key"]] for e in self.plan["engines"] if e["role"] == "prefill"],
                               [addr[e["key"]] for e in self.plan["engines"] if e["role"] == "decode"],
                               self.plan.get("busy_share", 32))
        print(json.dumps({"ports": self.ports, "pid": os.getpid()}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # EOF: the bench is gone


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    plan = json.loads(sys.stdin.readline())
    threading.current_thread().name = "targets"
    asyncio.run(Targets(plan).main())
    os._exit(0)  # the stdin reader thread may still block


if __name__ == "__main__":
    main()
