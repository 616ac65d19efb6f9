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


async def worker(args, body, stop_at, lat, errors):
    loop = asyncio.get_running_loop()
    path = b"/v1/completions"
    if args.mode == "proxy":
        ph, pp = _addr(args.proxy)
        conn = await open_connection(loop, ph, pp, 5)
        req = build_request(b"POST", path, args.proxy.encode(), json.dumps(body).encode(), [])
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            conn.send(req, 30)
            await conn.read_head()
            await conn.read_body(30)
            lat.append(time.perf_counter() - t0)
            if conn.status != 200:
                errors.append(conn.status)
        conn.close()
        return
    (ph, pp), (dh, dp) = _addr(args.prefill), _addr(args.decode)
    pc = await open_connection(loop, ph, pp, 5)
    dc = await open_connection(loop, dh, dp, 5)
    preq = build_request(b"POST", path, args.prefill.encode(), prefill_body(body), [(b"X-Request-Id", b"x")])
    while time.perf_counter() < stop_at:
        t0 = time.perf_counter()
        pc.send(preq, 30)
        await pc.read_head()
        kv = json.loads(await pc.read_body(30))["kv_transfer_params"]
        dbody = dict(body)
        dbody["kv_transfer_params"] = kv
        dc.send(build_request(b"POST", path, args.decode.encode(), json.dumps(dbody).encode(),
                              [(b"X-Request-Id", b"x")]), 30)
        await dc.read_head()
        await dc.read_body(30)
        lat.append(time.perf_counter() - t0)
        if dc.status != 200:
            errors.append(dc.status)
    pc.close()
    dc.close()


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
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
