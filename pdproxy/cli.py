"""Command line: flags (ours and the vllm-ascend example proxy's) and/or a YAML file -> Config -> serve."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from .config import PD_FLOWS, POLICIES, Config, ConfigError, load_yaml

log = logging.getLogger("pdproxy")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdproxy", description="Prefill/Decode disaggregation proxy for vLLM")
    a = p.add_argument
    a("--config", help="YAML file with any of the settings below (flags given here win)")
    a("--host", help="listen address (default 127.0.0.1)")
    a("--port", type=int, help="listen port (default 8000; 0 = any free port)")
    a("--prefill", nargs="+", action="extend", metavar="HOST:PORT", help="Prefill instances")
    a("--decode", nargs="+", action="extend", metavar="HOST:PORT", help="Decode instances")
    ex = p.add_argument_group("vllm-ascend example proxy flags (accepted as they are)")
    ex.add_argument("--prefiller-hosts", nargs="+", default=None)
    ex.add_argument("--prefiller-ports", nargs="+", type=int, default=None)
    ex.add_argument("--decoder-hosts", nargs="+", default=None)
    ex.add_argument("--decoder-ports", nargs="+", type=int, default=None)
    ex.add_argument("--retry-delay", type=float, help="accepted; retries here go to another instance at once")
    ex.add_argument("--max-waiting-retries", type=int, help="accepted, unused")
    ex.add_argument("--waiting-retry-interval", type=float, help="accepted, unused")
    ex.add_argument("--workers", type=_workers, help="serving processes, one port (default 1; 'auto' = this host's "
                    "cores): one proxy to clients and the admin API (supervisor.py)")
    b = p.add_argument_group("balancing")
    b.add_argument("--policy", choices=POLICIES)
    b.add_argument("--prefill-policy", choices=POLICIES)
    b.add_argument("--decode-policy", choices=POLICIES)
    b.add_argument("--hash-key", choices=("request_id", "user", "client_ip", "prefix"))
    b.add_argument("--prefix-chars", type=int)
    b.add_argument("--hash-load-factor", type=float)
    b.add_argument("--cache-threshold", type=float, help="cache_aware: share of the prompt an instance must hold "
                   "to get it (default 0.3)")
    b.add_argument("--balance-abs-threshold", type=int, help="cache_aware: in-flight spread that overrides the "
                   "cache (default 64)")
    b.add_argument("--balance-rel-threshold", type=float, help="cache_aware: and max > min x this (default 1.5)")
    b.add_argument("--cache-chars", type=int, help="cache_aware: prompt characters remembered per instance "
                   "(default 4 Mi)")
    b.add_argument("--kv-events", nargs="+", action="extend", metavar="SPEC", help="cache_aware: subscribe to the "
                   "engines' KV cache events (vLLM --kv-events-config): HOST:PORT=tcp://H:P[|tcp://H:REPLAY][,...] "
                   "per instance (one endpoint per DP rank), or a template like tcp://{host}:5557 for the others; "
                   "`discover` (alone, or as HOST:PORT=discover) asks each instance's GET /kv_event_sources, where "
                   "vLLM reports the port a tcp://*:0 endpoint bound")
    b.add_argument("--kv-events-topic", help="cache_aware: the publishers' topic (default: every topic)")
    b.add_argument("--tokenizer", metavar="DIR", help="cache_aware with --kv-events: the model's tokenizer "
                   "directory (tokenizer.json, tokenizer_config.json)")
    b.add_argument("--sticky-header", help="header naming a session, e.g. X-Session-Id")
    b.add_argument("--sticky-ttl", type=float)
    h = p.add_argument_group("health, retries, timeouts")
    h.add_argument("--health-path", help="/health (default) or /v1/models")
    h.add_argument("--health-interval", type=float)
    h.add_argument("--health-timeout", type=float)
    h.add_argument("--health-timeouts-to-eject", type=int, help="unanswered health checks in a row that eject a "
                   "healthy instance (default 3); a refused connection or an error answer ejects at once")
    h.add_argument("--eject-after-5xx", type=int)
    h.add_argument("--max-retries", type=int)
    h.add_argument("--connect-timeout", type=float)
    h.add_argument("--first-byte-timeout", type=float)
    h.add_argument("--total-timeout", type=float)
    lim = p.add_argument_group("limits")
    lim.add_argument("--max-body-bytes", type=int)
    lim.add_argument("--rate-limit", type=float, help="requests/s over all clients (0 = off)")
    lim.add_argument("--rate-burst", type=float)
    lim.add_argument("--client-rate-limit", type=float, help="requests/s per client (0 = off)")
    lim.add_argument("--client-rate-burst", type=float)
    lim.add_argument("--client-key", help="client_ip or header:<name>")
    lim.add_argument("--max-url-bytes", type=int, help="longer request URLs get 414 (default 8192)")
    lim.add_argument("--max-header-count", type=int, help="more request headers get 431 (default 100)")
    lim.add_argument("--max-header-bytes", type=int, help="all request headers together; over it, 431 "
                     "(default 65536)")
    lim.add_argument("--max-header-line-bytes", type=int, help="one request header; over it, 431 (default 16384)")
    o = p.add_argument_group("admin and backends")
    o.add_argument("--admin-token")
    o.add_argument("--admin-token-file")
    o.add_argument("--admin-host", help="serve the admin API only on this address (with --admin-port), "
                   "not on the main listener")
    o.add_argument("--admin-port", type=int, help="port of the admin API's own listener (0 = any free port)")
    o.add_argument("--backend-api-key", help="sent as Authorization: Bearer when the client sends none "
                   "(default: $OPENAI_API_KEY)")
    o.add_argument("--no-recompute", action="store_true", help="do not continue answers Decode recomputed")
    o.add_argument("--pd-flow", choices=PD_FLOWS, help="pull (MooncakeConnectorV1: Prefill, then Decode; default) or "
                   "layerwise (MooncakeLayerwiseConnector: Decode first, which calls back POST /v1/metaserver)")
    o.add_argument("--advertise-host", help="layerwise: the address the Decodes call back "
                   "(http://ADDRESS:PORT/v1/metaserver/<token>; default --host, which then must not be a wildcard)")
    o.add_argument("--decode-hosts", nargs="+", action="extend", metavar="API_HOST:PORT=ADDR[,ADDR...]",
                   help="layerwise: the other nodes a Decode instance's metaserver calls may come from and name as "
                   "remote_host (vLLM internal DP whose ranks run on several nodes); by default only the --decode "
                   "address's own host")
    o.add_argument("--max-recomputes", type=int)
    o.add_argument("--log-level")
    return p


def _pairs(hosts, ports, flag) -> list[str]:
    if hosts is None and ports is None:
        return []
    hosts = hosts or ["localhost"]
    ports = ports or []
    if len(hosts) == 1 and len(ports) > 1:
        hosts = hosts * len(ports)
    if len(hosts) != len(ports):
        raise ConfigError(f"--{flag}-hosts and --{flag}-ports must have the same length")
    return [f"{h}:{p}" for h, p in zip(hosts, ports, strict=True)]


def config_from_args(argv=None) -> Config:
    args = build_parser().parse_args(argv)
    values: dict = {}
    if args.config:
        values.update(load_yaml(args.config))
    skip = {"config", "prefiller_hosts", "prefiller_ports", "decoder_hosts", "decoder_ports", "retry_delay",
            "max_waiting_retries", "waiting_retry_interval", "admin_token_file", "no_recompute",
            "prefill", "decode"}
    for name, value in vars(args).items():
        if name not in skip and value is not None:
            values[name] = value
    prefill = (args.prefill or []) + _pairs(args.prefiller_hosts, args.prefiller_ports, "prefiller")
    decode = (args.decode or []) + _pairs(args.decoder_hosts, args.decoder_ports, "decoder")
    if prefill:
        values["prefill"] = prefill
    if decode:
        values["decode"] = decode
    if args.admin_token_file:
        with open(args.admin_token_file, encoding="utf-8") as fh:
            values["admin_token"] = fh.read().strip()
    if args.no_recompute:
        values["recompute"] = False
    return Config(**values).validate()


def _workers(text: str):
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number or 'auto': {text!r}") from None


async def run(cfg: Config, ready=None) -> None:
    from .admin import AdminListener
    from .app import ProxyApp

    app = ProxyApp(cfg)
    await app.health.check_all()  # take traffic at once on instances that are already up
    caps = cfg.request_caps()
    server = await listen(app, cfg.host, cfg.port, caps, "--host/--port")
    servers = [server]
    if cfg.admin_listener is not None:
        admin_server = await listen(AdminListener(app.admin, app.refused), *cfg.admin_listener, caps,
                                    "--admin-host/--admin-port")
        servers.append(admin_server)
        admin_host, admin_port = admin_server.sockets[0].getsockname()[:2]
        print(f"pdproxy admin listening on http://{admin_host}:{admin_port}", flush=True)
    host, port = server.sockets[0].getsockname()[:2]
    app.listening(port)
    app.health.start()
    stop = stop_on_signals()
    print(f"pdproxy listening on http://{host}:{port}", flush=True)
    if ready is not None:
        ready(app, port)
    await stop.wait()
    for s in servers:
        s.close()
    app.health.stop()
    await drain(app)


async def run_worker(cfg: Config, spec: str) -> None:
    """One worker of --workers N (supervisor.py): serves the port beside the others once it has the pools."""
    import os
    import socket

    from .app import ProxyApp
    from .control import Channel
    from .shared_limits import SharedRateLimiter
    from .worker_link import WorkerLink

    index, control_fd, limits_fd = (int(x) for x in spec.split(":"))
    app = ProxyApp(cfg)
    if limits_fd >= 0:
        app.limiter = SharedRateLimiter(limits_fd, cfg.rate_limit, cfg.rate_burst, cfg.client_rate_limit,
                                        cfg.client_rate_burst)
    link = app.link = app.flow.link = WorkerLink(app, await Channel.open(socket.socket(fileno=control_fd)), index)
    stop = stop_on_signals()
    asyncio.get_running_loop().create_task(link.serve(stop))
    await asyncio.wait_for(link.has_state.wait(), 30)
    server = await listen(app, cfg.host, cfg.port, cfg.request_caps(), "--host/--port", reuse_port=True)
    app.listening(cfg.port)
    link.channel.send({"op": "ready", "pid": os.getpid()})
    await stop.wait()
    server.close()
    await drain(app)


def stop_on_signals(stop: asyncio.Event | None = None) -> asyncio.Event:
    """An event SIGTERM and SIGINT set; taken before the listening line is printed, so a stop sent on seeing it
    is a graceful one."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    return stop


async def drain(app) -> None:
    """Let requests in flight finish, within reason (10 s)."""
    for _ in range(100):
        if not any(b.inflight for pool in app.pools.values() for b in pool.backends):
            break
        await asyncio.sleep(0.1)


async def listen(app, host: str, port: int, caps, flags: str, reuse_port: bool = False):
    from .http_server import serve

    try:
        return await serve(app, host, port, caps, reuse_port=reuse_port)
    except OSError as exc:
        raise ConfigError(f"{flags}: cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def quiet_gc() -> None:
    """Keep the cyclic garbage collector's pauses out of the tail: the objects alive at start (modules, the app)
    are never scanned again, and a collection waits for 50,000 net allocations, not 700 (request objects are freed
    by reference counting; cycles, e.g. a failed request's traceback, are still collected). Measured with
    bench/proxy/compare.py at c=64: p99/p50 2.69 -> 1.83, with the harness's own floor at 1.50 (README,
    "Tail latency")."""
    import gc

    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def main(argv=None) -> int:
    import os

    from .supervisor import WORKER_ENV, Supervisor

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        cfg = config_from_args(argv)
    except (ConfigError, OSError) as exc:
        print(f"pdproxy: {exc}", file=sys.stderr)
        return 2
    worker = os.environ.get(WORKER_ENV)
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    if cfg.workers > 1 or worker:
        fmt = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
    logging.basicConfig(level=cfg.log_level.upper(), format=fmt)
    if worker:
        serving = run_worker(cfg, worker)
    elif cfg.workers > 1:
        serving = Supervisor(cfg, argv).run()
    else:
        serving = run(cfg)
    quiet_gc()
    try:
        import uvloop
    except ImportError:
        uvloop = None
    try:
        (uvloop.run if uvloop is not None else asyncio.run)(serving)
    except ConfigError as exc:  # a listener that cannot be opened
        print(f"pdproxy: {exc}", file=sys.stderr)
        return 2
    return 0
