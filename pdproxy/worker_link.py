"""A worker's side of `--workers N` (supervisor.py). The worker serves clients from its own copy of the instance
pools, which the supervisor keeps equal to its own; it tells the supervisor every passive verdict (a failure, the
first success after a 5xx) and hands it the admin API and /metrics, which need every worker's view."""

from __future__ import annotations

import asyncio
import logging

from .control import CapturedAnswer, Channel, ChannelClosed

log = logging.getLogger("pdproxy.worker")

FORWARD_TIMEOUT_S = 30.0  # an admin call may probe instances and wait for every worker to take the change
ROUTED_FLUSH_S = 0.02  # cache_aware picks go to the other workers in batches this far apart


class WorkerLink:
    def __init__(self, app, channel: Channel, index: int):
        self.app = app
        self.channel = channel
        self.index = index
        self.has_state = asyncio.Event()  # the first copy of the pools arrived: the worker may take traffic
        for pool in app.pools.values():
            pool.reporter = self
        self._routed: dict[str, list] = {}  # role -> [[addr, chunk hashes], ...] not sent yet
        for role, policy in app.cache_aware.items():
            policy.on_routed = lambda addr, hashes, role=role: self.routed(role, addr, hashes)

    # BackendPool.reporter
    def failure(self, role: str, addr: str, reason: str | None, status: int) -> None:
        self.channel.send({"op": "failure", "role": role, "addr": addr, "reason": reason, "status": status})

    def success(self, role: str, addr: str) -> None:
        self.channel.send({"op": "success", "role": role, "addr": addr})

    # cache_aware: one approximate view for every worker
    def routed(self, role: str, addr: str, hashes: list[int]) -> None:
        if not self._routed:
            asyncio.get_running_loop().call_later(ROUTED_FLUSH_S, self._send_routed)
        self._routed.setdefault(role, []).append([addr, hashes])

    def _send_routed(self) -> None:
        batches, self._routed = self._routed, {}
        for role, picks in batches.items():
            self.channel.send({"op": "routed", "role": role, "picks": picks})

    async def serve(self, stop: asyncio.Event) -> None:
        """Take the supervisor's messages until it goes, then stop the worker: no worker outlives it."""
        try:
            while True:
                message = await self.channel.receive()
                op = message.get("op")
                if op == "pools":
                    for role, entries in message["pools"].items():
                        self.app.pools[role].mirror(entries)
                    self.has_state.set()
                    self.channel.reply(message)
                elif op == "learn":
                    policy = self.app.cache_aware.get(message["role"])
                    if policy is not None:
                        for addr, hashes in message["picks"]:
                            policy.learn(addr, hashes)
                elif op == "metaserver":
                    asyncio.get_running_loop().create_task(self._metaserver(message))
                elif op == "snapshot":
                    self.channel.reply(message, **self.snapshot())
                elif op == "stop":
                    stop.set()
        except ChannelClosed:
            log.warning("worker %d: the supervisor is gone; stopping", self.index)
        stop.set()

    def snapshot(self) -> dict:
        app = self.app
        return {"counters": app.metrics.snapshot(),
                "backends": {role: {b.addr: [b.inflight, b.requests] for b in pool.backends}
                             for role, pool in app.pools.items()},
                "cache_aware": {role: {"routed": p.routed, "held": p.held_chars(), "kv_blocks": p.kv_blocks()}
                                for role, p in app.cache_aware.items()}}

    async def forward_admin(self, req, conn) -> None:
        message = {"op": "admin", "method": req.method, "path": req.path, "query": req.query,
                   "authorization": req.headers.get("authorization", ""),
                   "body": (req.body or b"").decode("latin-1")}
        await self._forward(message, conn)

    async def forward_metaserver(self, worker: int, token: str, caller: str, raw: bytes, conn) -> None:
        """A Decode's call with a token of another worker's: the supervisor hands it to that worker, which checks
        the call as if it had come to it (the caller's address travels with it)."""
        message = {"op": "metaserver", "worker": worker, "token": token, "caller": caller,
                   "body": raw.decode("latin-1")}
        await self._forward(message, conn, self.app.cfg.first_byte_timeout + 60.0)

    async def _metaserver(self, message: dict) -> None:
        answer = CapturedAnswer()
        flow = self.app.flow
        if flow.layerwise is None:
            answer.send_error(404, "not the layerwise flow", "NotFoundError")
        else:
            await flow.layerwise.answer(str(message.get("token", "")), str(message.get("caller", "")),
                                        message["body"].encode("latin-1"), answer, forwarded=True)
        self.channel.reply(message, **answer.fields())

    async def forward_metrics(self, conn) -> None:
        await self._forward({"op": "metrics"}, conn)

    async def _forward(self, message: dict, conn, timeout: float = FORWARD_TIMEOUT_S) -> None:
        try:
            answer = await self.channel.call(message, timeout)
        except (TimeoutError, ChannelClosed):
            conn.send_error(503, "the proxy's supervisor did not answer; try again", "ServiceUnavailableError")
            return
        conn.send_response(answer["status"], answer["body"].encode("latin-1"), answer["content_type"].encode(),
                           extra=[(k.encode(), v.encode()) for k, v in answer.get("headers", ())])
