"""Shared by the engine-failure load cases: simcluster engines and pdproxy as real processes on given loopback
addresses (stopped by PID), bounded concurrent load through the proxy in a thread of its own, and every answer
sorted as pdproxy/README.md ("Request flow", failures) says a client may see it:

- answered: 200 and a complete answer (JSON with a finish_reason; or an SSE stream of tokens ending in [DONE]);
- honest: the proxy's own error answers, 502/503/504 with an OpenAI-style `{"error": {...}}` body, or a stream
  that ends with `data: {"error": {...}}` then `data: [DONE]`;
- lost: anything else (a reset without an answer, a hang past the client's timeout, a malformed or cut answer,
  a status the proxy never sends for a backend failure).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from tests.pdproxy.proxy_procs import Cluster as ProxyTestCluster
from tests.pdproxy.proxy_procs import read_line, sse_events
from tests.pdproxy.proxy_procs import request as http_request
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]

MODEL = "sim-model"  # simcluster's generic-8b profile: 12 ms per token at time scale 1
CLIENT_TIMEOUT_S = 30.0  # an answer not complete by then counts as lost (hung)
HONEST_STATUSES = (502, 503, 504)
# ~50 ms of simulated Prefill at time scale 1 (a token per word): a Prefill always has legs in flight to lose
PROMPT_WORDS = 400


@dataclass
class Proc:
    role: str
    host: str
    port: int
    proc: subprocess.Popen
    killed_at: float | None = None  # time.monotonic() of the SIGKILL

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.addr}"

    def kill(self) -> float:
        self.killed_at = time.monotonic()
        os.kill(self.proc.pid, signal.SIGKILL)
        return self.killed_at


class Procs(ProxyTestCluster):
    """Engines and a proxy on given addresses; every process started is killed by PID in stop_all() (the pdproxy
    suite's Cluster)."""

    def __init__(self, time_scale: str = "1.0"):
        super().__init__()
        self.time_scale = time_scale

    def engine(self, role: str, host: str) -> Proc:
        api, kv_port = free_port(host), free_port(host)
        kv = {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
              "kv_port": str(kv_port), "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 1},
                                                                     "decode": {"dp_size": 1, "tp_size": 1}}}
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ASCEND_RT_VISIBLE_DEVICES": "0",
               "SIMCLUSTER_TIME_SCALE": self.time_scale, "SIMCLUSTER_STARTUP_S": "0.1"}
        proc = subprocess.Popen([sys.executable, "-m", "simcluster.engine", "serve", MODEL, "--host", host, "--port",
                                 str(api), "-tp", "1", "--served-model-name", MODEL, "--max-num-seqs", "64",
                                 "--kv-transfer-config", json.dumps(kv)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env,
                                start_new_session=True)
        self.procs.append(proc)
        return Proc(role, host, api, proc)

    def fake(self, host: str, name: str) -> Proc:
        """tests/pdproxy/fake_backend.py (a Prefill or Decode on demand, with injectable faults)."""
        proc = self._spawn([sys.executable, str(ROOT / "tests" / "pdproxy" / "fake_backend.py"), "--host", host,
                            "--name", name])
        return Proc(name, host, int(read_line(proc, "PORT").split()[1]), proc)

    def wait_healthy(self, engines: list[Proc], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        for e in engines:
            while True:
                try:
                    if http_request("GET", e.url + "/health", timeout=1)[0] == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or e.proc.poll() is not None:
                    raise RuntimeError(f"simcluster {e.role} on {e.addr} did not become healthy")
                time.sleep(0.1)

    def proxy(self, host: str, prefills: list[Proc], decodes: list[Proc], *args: str) -> Proc:
        proc = self._spawn([sys.executable, "-m", "pdproxy", "--host", host, "--port", "0", "--log-level", "WARNING",
                            "--prefill", *[p.addr for p in prefills], "--decode", *[d.addr for d in decodes], *args])
        port = int(read_line(proc, "pdproxy listening").rsplit(":", 1)[1])
        return Proc("proxy", host, port, proc)


def proxy_metric(proxy: Proc, name: str, **labels) -> float:
    """Sum of the proxy's samples of `name` whose labels include `labels`."""
    text = http_request("GET", proxy.url + "/metrics")[2].decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


# --- the load ----------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    stream: bool
    start: float  # time.monotonic()
    end: float
    kind: str  # answered | honest | lost
    status: int | None = None
    decode: str | None = None  # X-PD-Decode: the Decode that served it (set once a Decode answered 2xx)
    prefill: str | None = None  # X-PD-Prefill: the Prefill whose KV it carried
    retries: int = 0  # X-PD-Retries
    detail: str = ""

    @property
    def latency(self) -> float:
        return self.end - self.start


def classify(status: int, headers, raw: bytes, stream: bool) -> tuple[str, str]:
    """(kind, detail) of one whole answer."""
    try:
        if status in HONEST_STATUSES:
            error = json.loads(raw)["error"]
            ok = isinstance(error.get("message"), str) and error.get("type")
            return ("honest", f"{status} {error['type']}: {error['message']}") if ok else ("lost", raw[:200])
        if status != 200:
            return "lost", f"HTTP {status}: {raw[:200]!r}"
        if not stream:
            choice = json.loads(raw)["choices"][0]
            complete = isinstance(choice.get("text"), str) and choice.get("finish_reason") in ("length", "stop")
            return ("answered", "") if complete else ("lost", f"incomplete answer {raw[:200]!r}")
        events = sse_events(raw)
        if not events or events[-1] != "[DONE]":
            return "lost", f"stream ended without [DONE] after {len(events)} events"
        errors = [e for e in events[:-1] if "error" in e]
        if errors:
            last = errors[-1]["error"]
            ok = errors[-1] is events[-2] and isinstance(last.get("message"), str)
            return ("honest", f"stream error event after {len(events) - 2} events: {last['message']}") if ok \
                else ("lost", f"error event not last: {events[-3:]}")
        finished = any(e["choices"] and e["choices"][0].get("finish_reason") for e in events[:-1])
        return ("answered", "") if finished else ("lost", "stream of tokens without a finish_reason")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        return "lost", f"malformed answer ({type(exc).__name__}: {exc}): {raw[:200]!r}"


async def one_request(session: aiohttp.ClientSession, url: str, n: int, stream: bool, max_tokens: int) -> Outcome:
    body = {"model": MODEL, "prompt": f"request {n}: tell me about failover" + " tok" * PROMPT_WORDS, "stream": stream,
            "max_tokens": max_tokens}
    start = time.monotonic()
    try:
        async with session.post(url + "/v1/completions", json=body) as resp:
            raw = await resp.read()
            kind, detail = classify(resp.status, resp.headers, raw, stream)
            return Outcome(stream, start, time.monotonic(), kind, resp.status, resp.headers.get("X-PD-Decode"),
                           resp.headers.get("X-PD-Prefill"), int(resp.headers.get("X-PD-Retries", "0")), detail)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return Outcome(stream, start, time.monotonic(), "lost", detail=f"{type(exc).__name__}: {exc}")


async def drive(url: str, clients: int, duration_s: float, max_tokens: int, at: list) -> list[Outcome]:
    """`clients` closed-loop clients (even ones streaming) sending for `duration_s`; at = [(seconds, fn)] runs
    each fn at that offset from the start, on the load's own event loop."""
    loop = asyncio.get_running_loop()
    for offset, fn in at:
        loop.call_later(offset, fn)
    stop_at = time.monotonic() + duration_s
    out: list[Outcome] = []
    counter = iter(range(10 ** 9))
    timeout = aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S)

    async def client(i: int):
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while time.monotonic() < stop_at:
                out.append(await one_request(session, url, next(counter), i % 2 == 0, max_tokens))

    await asyncio.gather(*(client(i) for i in range(clients)))
    return out


@dataclass
class Load:
    """drive() in a thread of its own (the test's main thread runs the control plane's scrape rounds)."""

    url: str
    clients: int
    duration_s: float
    max_tokens: int = 16
    at: list = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    started: float = 0.0
    error: BaseException | None = None

    def __post_init__(self):
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            self.outcomes = asyncio.run(drive(self.url, self.clients, self.duration_s, self.max_tokens, self.at))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread by join()
            self.error = exc

    def start(self) -> Load:
        self.started = time.monotonic()
        self.thread.start()
        return self

    def join(self) -> list[Outcome]:
        self.thread.join(self.duration_s + CLIENT_TIMEOUT_S + 30)
        assert not self.thread.is_alive(), "the load did not finish"
        if self.error is not None:
            raise self.error
        return self.outcomes


def counts(outcomes: list[Outcome]) -> dict:
    c = {"sent": len(outcomes), "answered": 0, "honest": 0, "lost": 0}
    for o in outcomes:
        c[o.kind] += 1
    c["retried"] = sum(o.retries > 0 for o in outcomes if o.kind == "answered")
    return c


def misanswered(outcomes: list[Outcome], victim: Proc) -> list[Outcome]:
    """Outcomes the proxy's rules do not allow once `victim` (a Decode) was killed: anything lost, and any honest
    error other than a stream the victim had already begun (its head forwarded, so nothing is retried) and that
    was in flight at the kill."""
    return [o for o in outcomes if o.kind == "lost" or (o.kind == "honest" and not (
        o.stream and o.status == 200 and o.decode == victim.addr and o.start < victim.killed_at < o.end))]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)  # nearest rank
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]
