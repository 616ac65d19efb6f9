"""`--kv-events discover`: an instance's KV event publishers, as the instance itself reports them.

vLLM answers GET /kv_event_sources with the KVEventsConfig each DP rank it serves publishes with (`{"0": {...,
"endpoint": ..., "replay_endpoint": ...}}`, `{}` without --kv-events-config). An engine started with the endpoint
`tcp://*:0` binds VLLM_HOST_IP at a port of its choosing and reports that address and port there: the only way to
publish on one address rather than every interface, and a port nobody had to plan (docs/kv-events.md). A reported
wildcard host (an engine started with `tcp://*:PORT`) stands for the instance's own host.

The proxy asks when the instance joins, and again while none of its subscribers is connected (an engine that
restarted bound new ports): every INTERVAL_S at first, backing off to MAX_INTERVAL_S while there is no usable
answer, and at once when the health checks take the instance (back) in. Until its subscribers connect the instance
has no exact view and cache_aware uses its approximate one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from .http_client import BackendError, http_get
from .kv_index import Endpoint

log = logging.getLogger("pdproxy.kv_events")
PATH = "/kv_event_sources"
INTERVAL_S = 2.0
POLL_S = 0.5  # how often the subscribers' state and the instance's health are looked at (no I/O)
MAX_INTERVAL_S = 30.0
CONNECT_GRACE_S = 5.0  # new subscribers get this long to connect before the instance is asked again
TIMEOUT_S = 5.0
WILDCARDS = ("*", "0.0.0.0", "::", "[::]")


class SourcesError(Exception):
    pass


def parse_sources(body: bytes, host: str) -> list[tuple[Endpoint, str]]:
    """(endpoint, topic) per publishing DP rank, in rank order; SourcesError names what is wrong."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise SourcesError(f"{PATH} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SourcesError(f"{PATH}: expected an object of DP rank -> publisher config, got {type(data).__name__}")
    out = []
    for rank, config in sorted(data.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdecimal() else -1):
        if not str(rank).isdecimal() or not isinstance(config, dict):
            raise SourcesError(f"{PATH}: rank {rank!r}: expected a decimal rank and a publisher config object")
        if not config.get("enable_kv_cache_events") or config.get("publisher", "zmq") != "zmq":
            continue
        pub, replay, topic = config.get("endpoint"), config.get("replay_endpoint"), config.get("topic") or ""
        for field, value in (("endpoint", pub), ("replay_endpoint", replay)):
            if (value is not None or field == "endpoint") and not (
                    isinstance(value, str) and value.startswith(("tcp://", "ipc://"))):
                raise SourcesError(f"{PATH}: rank {rank}: {field} {value!r} is not a tcp:// or ipc:// endpoint")
        if not isinstance(topic, str):
            raise SourcesError(f"{PATH}: rank {rank}: topic {topic!r} is not a string")
        out.append((Endpoint(_own_host(pub, host), _own_host(replay, host) if replay else None), topic))
    return out


def _own_host(endpoint: str, host: str) -> str:
    if not endpoint.startswith("tcp://"):
        return endpoint
    address, _, port = endpoint[6:].rpartition(":")
    return f"tcp://{host}:{port}" if address in WILDCARDS else endpoint


async def fetch_sources(backend, timeout: float = TIMEOUT_S) -> list[tuple[Endpoint, str]]:
    try:
        status, body = await http_get(backend, PATH, timeout)
    except BackendError as exc:
        raise SourcesError(f"{PATH}: {exc.reason}") from None
    if status != 200:
        raise SourcesError(f"{PATH} answered HTTP {status}")
    return parse_sources(body, backend.host)


class SourceFinder:
    """Keeps one instance's subscribers (view.subs[addr]) on the publishers the instance reports."""

    def __init__(self, view, backend):
        self.view, self.backend, self.addr = view, backend, backend.addr
        self.known: list[tuple[Endpoint, str]] | None = None
        self.problem = ""
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        backoff, next_ask, subscribed_at, was_up = INTERVAL_S, 0.0, float("-inf"), self.backend.available
        while self.addr in self.view.subs:
            now, up = time.monotonic(), self.backend.available
            if up and not was_up:  # the health checks took it (back) in: an engine that restarted is asked at once
                next_ask = now
            was_up = up
            unconnected = not any(s.live for s in self.view.subs[self.addr])
            if unconnected and now >= next_ask and now - subscribed_at >= CONNECT_GRACE_S:
                found = await self._ask()
                if found:
                    backoff = INTERVAL_S
                    if found != self.known:
                        self._subscribe(found)
                        subscribed_at = time.monotonic()
                else:
                    backoff = min(backoff * 2, MAX_INTERVAL_S)
                next_ask = time.monotonic() + backoff
            await asyncio.sleep(POLL_S)

    async def _ask(self) -> list[tuple[Endpoint, str]] | None:
        try:
            found = await fetch_sources(self.backend)
        except SourcesError as exc:
            self._note(f"kv events {self.addr}: {exc}; its approximate view is used")
            return None
        if not found:
            self._note(f"kv events {self.addr}: {PATH} lists no KV event publisher (the engine was started without "
                       "--kv-events-config?); its approximate view is used")
            return None
        self.problem = ""
        return found

    def _note(self, problem: str) -> None:
        if problem != self.problem:  # once per distinct problem, not every poll
            log.warning("%s", problem)
        self.problem = problem

    def _subscribe(self, found: list[tuple[Endpoint, str]]) -> None:
        from .kv_events import Subscriber

        for s in self.view.subs.get(self.addr, ()):
            s.stop()
        subs = [Subscriber(e.pub, e.replay, self.view.topic or topic, f"{self.addr} rank {r}")
                for r, (e, topic) in enumerate(found)]
        for s in subs:
            s.start()
        self.view.subs[self.addr], self.known = subs, found
        log.info("kv events %s: subscribing to %s (from %s)", self.addr,
                 ", ".join(e.pub + (f" replay {e.replay}" if e.replay else "") for e, _ in found), PATH)
