"""Keep-alive load generator (its own process): `direct` makes both PD legs itself, `proxy` asks the proxy.

Prints one JSON line: requests, errors, seconds, rps, p50_ms, p99_ms, and all_requests (warm-up included, so
that the caller can divide the proxy's CPU time over every request it served).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from pdproxy.http_client import build_request, open_connection
from pdproxy.leg_bodies import prefill_body


def _addr(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


class Client:
    """One keep-alive client: `proxy` asks the proxy, `direct` makes both PD legs itself (the floor of any proxy).
    openloop_gen.py uses it too."""

    def __init__(self, args, body):
        self.args = args
        self.body = body
        self.path = b"/v1/completions"

    async def connect(self, loop):
        a = self.args
        if a.mode == "proxy":
            h, p = _addr(a.proxy)
            self.conn = await open_connection(loop, h, p, 5)
            self.req = build_request(b"POST", self.path, a.proxy.encode(), json.dumps(self.body).encode(), [])
        else:
            (ph, pp), (dh, dp) = _addr(a.prefill), _addr(a.decode)
            self.pc = await open_connection(loop, ph, pp, 5)
            self.dc = await open_connection(loop, dh, dp, 5)
            self.preq = build_request(b"POST", self.path, a.prefill.encode(), prefill_body(self.body),
                                      [(b"X-Request-Id", b"x")])
        return self

    async def one(self) -> int:
        """One request; its final HTTP status."""
        if self.args.mode == "proxy":
            self.conn.send(self.req, 30)
            await self.conn.read_head()
            await self.conn.read_body(30)
            return self.conn.status
        self.pc.send(self.preq, 30)
        await self.pc.read_head()
        kv = json.loads(await self.pc.read_body(30))["kv_transfer_params"]
        body = dict(self.body, kv_transfer_params=kv)
        self.dc.send(build_request(b"POST", self.path, self.args.decode.encode(), json.dumps(body).encode(),
                                   [(b"X-Request-Id", b"x")]), 30)
        await self.dc.read_head()
        await self.dc.read_body(30)
        return self.dc.status

    def close(self):
        for conn in (getattr(self, name, None) for name in ("conn", "pc", "dc")):
            if conn is not None:
                conn.close()


async def worker(args, body, stop_at, lat, errors):
    client = await Client(args, body).connect(asyncio.get_running_loop())
    while time.perf_counter() < stop_at:
        t0 = time.perf_counter()
        status = await client.one()
        lat.append(time.perf_counter() - t0)
        if status != 200:
            errors.append(status)
    client.close()


def run(main) -> None:
    """uvloop when installed, else asyncio."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
        return
    uvloop.run(main())


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("direct", "proxy"), required=True)
    ap.add_argument("--proxy")
    ap.add_argument("--prefill")
    ap.add_argument("--decode")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=0.3)
    ap.add_argument("--stream", action="store_true")
    args = ap.parse_args()
    body = {"model": "fake-model", "prompt": "The quick brown fox jumps over the lazy dog. " * 8,
            "max_tokens": 16, "stream": args.stream}
    # warm up connections and caches, then measure
    scratch = []
    await asyncio.gather(*(worker(args, body, time.perf_counter() + args.warmup, scratch, [])
                           for _ in range(args.concurrency)))
    lat, errors = [], []
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(args, body, t0 + args.seconds, lat, errors) for _ in range(args.concurrency)))
    elapsed = time.perf_counter() - t0
    lat.sort()
    n = len(lat)
    print(json.dumps({"requests": n, "all_requests": n + len(scratch), "errors": len(errors),
                      "seconds": elapsed, "rps": n / elapsed,
                      "p50_ms": lat[n // 2] * 1e3 if n else None,
                      "p99_ms": lat[min(n - 1, int(n * 0.99))] * 1e3 if n else None}), flush=True)


if __name__ == "__main__":
    run(main)
