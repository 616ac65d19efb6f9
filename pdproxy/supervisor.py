"""`--workers N`: one supervisor and N worker processes serving one port as one proxy.

Every worker listens on the port with SO_REUSEPORT (the kernel spreads connections over them); the supervisor
holds the port bound, without listening, so it stays ours while a worker restarts and `--port 0` names one port.
The supervisor holds the truth and serves no client: the instance pools (health checks run here only; every
passive verdict a worker reaches comes here, the ejection rule is applied once, and the result is copied to every
worker), the admin API (a worker hands its admin requests here; a change is answered once every worker has it),
/metrics (the sum of every worker's counts, and of workers that have exited) and the rate-limit buckets (a shared
memory file, shared_limits.py). A worker that dies is started again; when the supervisor goes, so do they.
Workers share one PYTHONHASHSEED, so a prompt's chunk hashes (cache_aware.py) are the same in all of them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import socket
import sys
import time
from types import SimpleNamespace

from .app import ProxyApp
from .config import ConfigError
from .control import CapturedAnswer, Channel, ChannelClosed
from .errors import error_body
from .http_request import Request
from .metrics import Metrics
from .shared_limits import create_shared_file
from .supervisor_metrics import WorkersCollector, answered, merged_cache_aware

log = logging.getLogger("pdproxy.supervisor")

SYNC_TIMEOUT_S = 2.0  # a worker that takes longer to copy a change is not waited for
SNAPSHOT_TIMEOUT_S = 5.0
START_TIMEOUT_S = 30.0
STOP_GRACE_S = 15.0  # workers finish the requests in flight (cli.drain: 10 s) before they are killed
WORKER_ENV = "PDPROXY_WORKER"  # "index:control fd:rate-limit fd" in a worker's environment


class WorkerProcess:
    def __init__(self, index: int, proc, channel: Channel):
        self.index = index
        self.proc = proc
        self.channel = channel
        self.started = time.monotonic()
        self.ready = asyncio.Event()
        self.snapshot: dict | None = None  # its counts at the last scrape


class Supervisor:
    def __init__(self, cfg, argv: list[str]):
        self.cfg = cfg
        self.argv = argv
        self.app = None  # the pools, health checker and admin API every worker follows (made on the loop)
        self.workers: dict[int, WorkerProcess] = {}
        self.stopping = False
        self.restarts = 0
        self.retired = Metrics(tuple)  # counts of workers that exited
        self.seed = str(random.randrange(1, 2**32))
        self.limits_fd = -1
        self.port = cfg.port
        self._sync_task = None
        self._resync = False
        self._metrics_task = None  # the /metrics render under way (render_metrics)

    # start and stop
    async def run(self, ready=None) -> None:
        from .cli import listen, stop_on_signals

        cfg = self.cfg
        stop = stop_on_signals()
        self.app = ProxyApp(cfg, routes_requests=False)
        for pool in self.app.pools.values():
            pool.on_change = self._pools_changed
        if self.app.limiter.enabled:
            self.limits_fd = create_shared_file()
        await self.app.health.check_all()
        reservation = reserve_port(cfg.host, cfg.port)
        self.port = reservation.getsockname()[1]
        try:
            await asyncio.gather(*(self.start_worker(i) for i in range(cfg.workers)))
            waiting = [w.ready.wait() for w in self.workers.values()]
            try:
                await asyncio.wait_for(asyncio.gather(*waiting), START_TIMEOUT_S)
            except TimeoutError:
                raise ConfigError(f"the workers did not start within {START_TIMEOUT_S:.0f} s") from None
            servers = []
            if cfg.admin_listener is not None:
                servers.append(await listen(SupervisorAdminListener(self), *cfg.admin_listener,
                                            cfg.request_caps(), "--admin-host/--admin-port"))
                admin_host, admin_port = servers[0].sockets[0].getsockname()[:2]
                print(f"pdproxy admin listening on http://{admin_host}:{admin_port}", flush=True)
            self.app.health.start()
            log.info("%d workers serving, pids %s", cfg.workers, " ".join(str(w.proc.pid) for w in self.workers.values()))
            print(f"pdproxy listening on http://{cfg.host}:{self.port}", flush=True)
            if ready is not None:
                ready(self, self.port)
            await stop.wait()
            for s in servers:
                s.close()
        finally:
            await self.stop_workers()
            reservation.close()

    async def start_worker(self, index: int) -> None:
        ours, theirs = socket.socketpair()
        fds = [theirs.fileno()] + ([self.limits_fd] if self.limits_fd >= 0 else [])
        env = {**os.environ, WORKER_ENV: f"{index}:{theirs.fileno()}:{self.limits_fd}", "PYTHONHASHSEED": self.seed}
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "pdproxy", *self.argv,
                                                    "--port", str(self.port), pass_fds=fds, env=env)
        theirs.close()
        w = WorkerProcess(index, proc, await Channel.open(ours))
        self.workers[index] = w
        asyncio.get_running_loop().create_task(self._serve_worker(w))
        w.channel.send({"op": "pools", "pools": self._pools_now()})

    async def stop_workers(self) -> None:
        self.stopping = True
        self.app.health.stop()
        live = [w for w in self.workers.values() if w.proc.returncode is None]
        for w in live:
            w.proc.send_signal(signal.SIGTERM)
        waits = [w.proc.wait() for w in live]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), STOP_GRACE_S)
        except TimeoutError:
            for w in live:
                if w.proc.returncode is None:
                    log.warning("worker %d (pid %d) did not stop in %.0f s; killing it", w.index, w.proc.pid,
                                STOP_GRACE_S)
                    w.proc.kill()

    async def _serve_worker(self, w: WorkerProcess) -> None:
        try:
            while True:
                message = await w.channel.receive()
                self._dispatch(w, message)
        except ChannelClosed:
            pass
        code = await w.proc.wait()
        if w.snapshot is not None:
            self.retired.absorb(w.snapshot["counters"])
        if self.workers.get(w.index) is w:
            del self.workers[w.index]
        # a worker that keeps dying at start waits longer each time, up to 30 s
        quick = time.monotonic() - w.started < 5.0
        await asyncio.sleep(min(30.0, 0.5 * (2 ** min(self.restarts, 6))) if quick else 0.5)
        if self.stopping:
            return
        self.restarts += 1
        log.error("worker %d (pid %d) exited with status %s; starting it again", w.index, w.proc.pid, code)
        try:
            await self.start_worker(w.index)
        except OSError as exc:
            log.error("worker %d could not be started again: %s", w.index, exc)

    def _dispatch(self, w: WorkerProcess, message: dict) -> None:
        op = message.get("op")
        if op == "failure":
            pool = self.app.pools[message["role"]]
            b = pool.get(message["addr"])
            if b is not None:
                reason = message.get("reason")
                pool.report_failure(b, SimpleNamespace(reason=reason) if reason else None, message.get("status", 0))
                self.sync_soon()  # a 5xx streak counts even before it ejects
        elif op == "success":
            pool = self.app.pools[message["role"]]
            b = pool.get(message["addr"])
            if b is not None and b.fail_5xx:
                pool.report_success(b)
                self.sync_soon()
        elif op == "routed":  # cache_aware picks: every other worker learns them
            relay = {"op": "learn", "role": message["role"], "picks": message["picks"]}
            for other in self.workers.values():
                if other is not w:
                    other.channel.send(relay)
        elif op == "ready":
            w.ready.set()
            log.info("worker %d (pid %d) is serving", w.index, w.proc.pid)
        elif op == "admin":
            asyncio.get_running_loop().create_task(self._answer_admin(w, message))
        elif op == "metrics":
            asyncio.get_running_loop().create_task(self._answer_metrics(w, message))
        elif op == "metaserver":
            asyncio.get_running_loop().create_task(self._route_metaserver(w, message))

    # one truth: the pools
    def _pools_now(self) -> dict:
        return {role: pool.state_entries() for role, pool in self.app.pools.items()}

    def _pools_changed(self, pool) -> None:
        self.sync_soon()

    def sync_soon(self) -> None:
        """Copy the pools to every worker once the current change is complete (changes coalesce)."""
        if self._sync_task is None or self._sync_task.done():
            self._sync_task = asyncio.get_running_loop().create_task(self.sync())
        else:
            self._resync = True

    async def sync(self) -> None:
        """Copy the pools to every worker and wait until each has them (or SYNC_TIMEOUT_S)."""
        while True:
            self._resync = False
            message = {"op": "pools", "pools": self._pools_now()}
            calls = [w.channel.call(message, SYNC_TIMEOUT_S) for w in self.workers.values()]
            await asyncio.gather(*calls, return_exceptions=True)
            if not self._resync:
                return

    async def synced(self) -> None:
        """Return once every change made so far is in every worker."""
        while self._sync_task is not None and not self._sync_task.done():
            await asyncio.shield(self._sync_task)
        await self.sync()

    # the admin API, for every worker and the admin listener
    async def admin_answer(self, req) -> SimpleNamespace:
        answer = CapturedAnswer()
        if req.method == "GET":
            await self.gather_counts()
        await self.app.admin.handle(req, answer)
        if req.method != "GET":
            await self.synced()
        return answer

    async def _answer_admin(self, w: WorkerProcess, message: dict) -> None:
        headers = {"authorization": message.get("authorization", "")}
        req = Request(message["method"], message["path"], message.get("query", ""), headers,
                      message.get("body", "").encode("latin-1"), "", False)
        try:
            answer = await self.admin_answer(req)
        except Exception as exc:  # never leave a worker's client waiting
            log.exception("admin request failed")
            answer = CapturedAnswer()
            answer.send_error(500, f"internal proxy error: {type(exc).__name__}", "InternalServerError")
        w.channel.reply(message, **answer.fields())

    # the layerwise flow: a Decode's metaserver call reached a worker that does not hold its request
    async def _route_metaserver(self, w: WorkerProcess, message: dict) -> None:
        """Hand the call to the worker its token names (layerwise.token_worker), which checks it and answers once its
        Prefill is done; a call naming no other serving worker is a 404. One worker is asked, never all: a client may
        post any token, with a body up to --max-body-bytes."""
        holder = self.workers.get(message.get("worker"))
        reply = None
        if holder is not None and holder is not w:
            ask = {"op": "metaserver", "token": message.get("token", ""), "caller": message.get("caller", ""),
                   "body": message["body"]}
            try:
                reply = await holder.channel.call(ask, self.cfg.first_byte_timeout + 30.0)
            except (ChannelClosed, TimeoutError):
                reply = None
        if reply is None:
            w.channel.reply(message, status=404, content_type="application/json",
                            body=error_body(404, "no worker holds this request", "NotFoundError").decode())
        else:
            w.channel.reply(message, **{k: reply[k] for k in ("status", "body", "content_type", "headers")
                                        if k in reply})

    # /metrics and the admin listing: every worker's counts, summed
    async def gather_counts(self) -> tuple[list[dict], int]:
        """Every serving worker's counts (its last ones when it does not answer in time), and how many did not.
        The supervisor's own backends, which serve nothing, are given the workers' in-flight and request sums."""
        live = [w for w in self.workers.values() if w.ready.is_set()]
        replies = await asyncio.gather(*(w.channel.call({"op": "snapshot"}, SNAPSHOT_TIMEOUT_S) for w in live),
                                       return_exceptions=True)
        missing = 0
        for w, reply in zip(live, replies, strict=True):
            if isinstance(reply, dict):
                w.snapshot = reply
            else:
                missing += 1
        snapshots = [w.snapshot for w in live if w.snapshot is not None]
        for role, pool in self.app.pools.items():
            for b in pool.backends:
                figures = [snap["backends"].get(role, {}).get(b.addr, (0, 0)) for snap in snapshots]
                b.inflight = sum(f[0] for f in figures)
                b.requests = sum(f[1] for f in figures)
        return snapshots, missing

    async def render_metrics(self) -> bytes:
        """The /metrics page. Scrapes that come while one is rendered share it: /metrics is on the client-facing port
        without a token, and one page costs a snapshot from every worker, in the process that also routes metaserver
        calls and runs the health checks. A client asking over and over costs one render at a time."""
        if self._metrics_task is None or self._metrics_task.done():
            self._metrics_task = asyncio.get_running_loop().create_task(self._render_metrics())
        return await asyncio.shield(self._metrics_task)

    async def _render_metrics(self) -> bytes:
        snapshots, missing = await self.gather_counts()
        merged = Metrics(lambda: self.app.pools.values(), lambda: merged_cache_aware(snapshots))
        merged.absorb(self.retired.snapshot())
        merged.absorb(self.app.metrics.snapshot())  # the admin listener's refusals are counted here
        for snap in snapshots:
            merged.absorb(snap["counters"])
        live = [w for w in self.workers.values() if w.ready.is_set()]
        per_worker = {w.index: answered(w.snapshot) for w in live if w.snapshot is not None}
        merged.registry.register(WorkersCollector(self.cfg.workers, len(live), self.restarts, missing, per_worker))
        return merged.render()

    async def _answer_metrics(self, w: WorkerProcess, message: dict) -> None:
        from .app import METRICS_TYPE

        try:
            body = await self.render_metrics()
            w.channel.reply(message, status=200, body=body.decode("latin-1"), content_type=METRICS_TYPE.decode())
        except Exception as exc:
            log.exception("metrics aggregation failed")
            w.channel.reply(message, status=500, content_type="application/json",
                            body=error_body(500, f"metrics aggregation failed: {type(exc).__name__}",
                                            "InternalServerError").decode())


class SupervisorAdminListener:
    """--admin-host/--admin-port with workers: the supervisor serves its admin API there itself."""

    def __init__(self, supervisor: Supervisor):
        self.supervisor = supervisor

    async def handle(self, req, conn):
        if not req.path.startswith("/admin/"):
            conn.send_error(404, f"no route for {req.method} {req.path} on the admin listener", "NotFoundError")
            return
        answer = await self.supervisor.admin_answer(req)
        conn.send_response(answer.status, answer.body, answer.content_type, answer.extra)

    def refused(self, status: int):
        self.supervisor.app.refused(status)


def reserve_port(host: str, port: int) -> socket.socket:
    """The listening address bound with SO_REUSEPORT and not listened on: the port is ours (and known, for port 0)
    and every worker can listen on it; the kernel gives connections only to listening sockets."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(addr)
    except OSError as exc:
        raise ConfigError(f"--host/--port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock
