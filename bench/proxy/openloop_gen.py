"""Open-loop load (its own process): requests arrive at a fixed rate whatever the answers do, each on the first
idle keep-alive connection of a pool; latency counts from the moment a request was due, so a stall shows in
every request it delays (no coordinated omission). `direct` makes both PD legs itself, `proxy` asks the proxy.

Prints one JSON line: due, done, errors, late_starts (due with no idle connection), p50/p90/p99/p999 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from loadgen import Client, run


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("direct", "proxy"), required=True)
    ap.add_argument("--proxy")
    ap.add_argument("--prefill")
    ap.add_argument("--decode")
    ap.add_argument("--rate", type=float, required=True, help="requests per second")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=0.5)
    args = ap.parse_args()
    body = {"model": "fake-model", "prompt": "The quick brown fox jumps over the lazy dog. " * 8, "max_tokens": 16}
    loop = asyncio.get_running_loop()
    idle = asyncio.Queue()
    for c in await asyncio.gather(*(Client(args, body).connect(loop) for _ in range(args.connections))):
        idle.put_nowait(c)
    lat, errors, late = [], [], 0
    tasks = set()
    interval = 1.0 / args.rate

    async def fire(due: float, measured: bool):
        client = await idle.get()
        status = await client.one()
        if measured:
            lat.append(time.perf_counter() - due)
            if status != 200:
                errors.append(status)
        idle.put_nowait(client)

    start = time.perf_counter()
    end = start + args.warmup + args.seconds
    i = 0
    while True:
        due = start + i * interval
        if due >= end:
            break
        now = time.perf_counter()
        if due > now:
            await asyncio.sleep(due - now)
        if idle.empty():
            late += 1
        t = loop.create_task(fire(due, due >= start + args.warmup))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
        i += 1
    await asyncio.gather(*tasks)
    lat.sort()
    n = len(lat)

    def q(x):
        return round(lat[min(n - 1, int(n * x))] * 1e3, 3) if n else None

    print(json.dumps({"due": n, "errors": len(errors), "late_starts": late, "rate": args.rate,
                      "p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99), "p999_ms": q(0.999)}), flush=True)


if __name__ == "__main__":
    run(main)
