"""`python -m simcluster.engine serve MODEL [vllm serve flags]` - what the `vllm` shim runs on a sim node."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from aiohttp import web

from simcluster.engine.args import parse
from simcluster.engine.config import ConfigError, build_config
from simcluster.engine.server import Engine, build_app

log = logging.getLogger("simcluster.engine")


async def serve(argv: list[str]) -> int:
    args = parse(argv)
    cfg = build_config(args)
    if args.headless:
        # Headless DP members expose no API server (docs/ascend-pd-launch-facts.md §1.3); they only hold dies.
        log.info("headless: holding dies %s, no API server", cfg.devices)
    engine = Engine(cfg)
    runner = None
    try:
        # Model "loading": the API port refuses connections until it is over, like a real start.
        await asyncio.sleep(float(os.environ.get("SIMCLUSTER_STARTUP_S", "0.3")))
        await engine.start_connectors()
        engine.register()
        if not args.headless:
            await engine.start()
            runner = web.AppRunner(build_app(engine), access_log=None)
            await runner.setup()
            # vLLM's API server logs this line, then uvicorn its three; /health answers from the last one on.
            log.info("Starting vLLM server on http://%s:%d", cfg.host, cfg.port)
            await web.TCPSite(runner, cfg.host, cfg.port).start()
            log.info("serving %s (%s) on http://%s:%d, kv_port %s, dies %s", cfg.served_names[0], cfg.kv_role,
                     cfg.host, cfg.port, cfg.kv_port, cfg.devices)
            _uvicorn_says(f"Started server process [{os.getpid()}]", "Waiting for application startup.",
                          "Application startup complete.")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        engine.unregister()
        if runner is not None:
            await runner.cleanup()
        await engine.close()
    return 0


def _uvicorn_says(*lines: str) -> None:
    """uvicorn's own lines, in its format ("INFO:" padded to 9 columns), on stderr as uvicorn writes them."""
    for line in lines:
        print(f"INFO:     {line}", file=sys.stderr, flush=True)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        return asyncio.run(serve(sys.argv[1:]))
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the port is taken: vLLM dies too
        print(f"OSError: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
