"""Browser tabs without a browser: each holds the deployment page's socket and then the deploy's job socket, and
keeps the job log exactly as static/js/job-live.js does: events appended in counter order, one that skips ahead
(the server throttles a burst to its newest message) or the job's end answered by a backfill over REST from the
last counter, at most one backfill running at a time. A refused or dropped handshake is tried again after the
page's own delay, as both pages do."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime

FINISHED = {"successful", "failed", "error", "canceled"}
TOPOLOGY_RECONNECT_S = [0.5, 1.0, 2.0, 5.0]  # static/js/live-socket.js RECONNECT_MS, as every page's socket
JOB_RECONNECT_S = TOPOLOGY_RECONNECT_S
MAX_ATTEMPTS = 20


class PageClient:
    def __init__(self, ws_base: str, http_base: str, cookie: str, http):
        self.ws_base, self.http_base, self.http = ws_base, http_base, http
        self.cookie = cookie
        self.sockets = []
        self.connect_ms: dict[str, float] = {}
        self.retries = {"deployment": 0, "job": 0}
        self.last = 0
        self.log: list[int] = []  # the counters shown, in the order shown
        self.latencies_ms: dict[int, float] = {}  # counter: event time to receipt, the events that came over the socket
        self.messages = {"event": 0, "status": 0, "node": 0, "deployment": 0}
        self.events_over_socket = self.events_over_rest = self.ignored_repeats = self.backfills = 0
        self.status = ""
        self.errors: list[str] = []
        self._backfilling: asyncio.Task | None = None
        self._readers: list[asyncio.Task] = []

    async def open(self, name: str, path: str, on_message, retry_after_s: list[float]) -> None:
        """Opens the socket as the page does: after a refused or dropped handshake it tries again after the page's
        delay (the i-th of retry_after_s, then the last). connect_ms is from the first try to the open socket."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake

        start = time.monotonic()
        for attempt in range(MAX_ATTEMPTS):
            try:
                ws = await connect(self.ws_base + path, additional_headers={"Cookie": self.cookie},
                                   origin=self.http_base, proxy=None, open_timeout=60, max_queue=None,
                                   ping_timeout=None)
                break
            except (InvalidHandshake, OSError, TimeoutError):
                self.retries[name] += 1
                await asyncio.sleep(retry_after_s[min(attempt, len(retry_after_s) - 1)])
        else:
            raise RuntimeError(f"{name} socket: no handshake in {MAX_ATTEMPTS} tries")
        self.connect_ms[name] = (time.monotonic() - start) * 1000
        self.sockets.append(ws)
        self._readers.append(asyncio.create_task(self._read(ws, on_message)))

    async def _read(self, ws, on_message) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for raw in ws:
                on_message(json.loads(raw))
        except ConnectionClosed as exc:
            if exc.rcvd is None or exc.rcvd.code != 1000:
                self.errors.append(f"socket closed: {exc}")

    async def open_deployment_page(self, deployment_id: int) -> None:
        await self.open("deployment", f"/ws/deployments/{deployment_id}/", self._on_deployment,
                        TOPOLOGY_RECONNECT_S)

    async def open_job_page(self, job_id: int) -> None:
        self.job_id = job_id
        await self.open("job", f"/ws/jobs/{job_id}/", self._on_job, JOB_RECONNECT_S)
        self.backfill()  # ws.onopen

    def _on_deployment(self, msg: dict) -> None:
        self.messages["deployment"] += 1

    def _on_job(self, msg: dict) -> None:
        kind = msg.get("type")
        if kind in self.messages:
            self.messages[kind] += 1
        if kind == "event":
            self._append(msg, over_socket=True)
        elif kind == "status":
            self.status = msg["status"]
            if self.status in FINISHED:
                self.backfill()

    def _append(self, ev: dict, *, over_socket: bool) -> None:
        if ev["counter"] <= self.last:
            self.ignored_repeats += 1
            return
        if ev["counter"] > self.last + 1:
            self.backfill()
            return
        self.last = ev["counter"]
        self.log.append(ev["counter"])
        if over_socket:
            self.events_over_socket += 1
            sent = datetime.fromisoformat(ev["time"]).timestamp()
            self.latencies_ms[ev["counter"]] = (time.time() - sent) * 1000
        else:
            self.events_over_rest += 1

    def backfill(self) -> asyncio.Task:
        if self._backfilling is None:
            self._backfilling = asyncio.create_task(self._backfill())
            self._backfilling.add_done_callback(self._backfill_done)
        return self._backfilling

    def _backfill_done(self, task: asyncio.Task) -> None:
        self._backfilling = None
        if not task.cancelled() and task.exception() is not None:
            self.errors.append(f"backfill: {task.exception()!r}")

    async def _backfill(self) -> None:
        self.backfills += 1
        url = f"{self.http_base}/api/jobs/{self.job_id}/events/?counter__gt={self.last}&limit=1000"
        while url:
            async with self.http.get(url, headers={"Cookie": self.cookie}) as resp:
                if resp.status != 200:
                    self.errors.append(f"backfill answered {resp.status}")
                    return
                page = await resp.json()
            for ev in page["results"]:
                self._append(ev, over_socket=False)
            url = page["next"]

    @property
    def settled(self) -> bool:
        """The page shows the job's end and has no backfill running."""
        return self.status in FINISHED and self._backfilling is None

    async def close(self) -> None:
        for ws in self.sockets:
            await ws.close()
        for task in self._readers:
            task.cancel()
        if self._backfilling is not None:
            self._backfilling.cancel()
