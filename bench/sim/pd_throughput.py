"""Requests per second through one simulated Prefill and one Decode (the proxy's two hops, done by hand).

Shows the emulator is not what limits the control plane's tests. Run:
  .venv/bin/python bench/sim/pd_throughput.py [--requests 400] [--concurrency 16] [--time-scale 0]
--time-scale 0 removes the modelled latency, so the figure is the emulator's own overhead
(HTTP, JSON, the TCP KV pull with SHA-256); 1 gives the cost model's real-hardware pace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.10.148"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start(role: str, port: int, kv_port: int, scale: str, seqs: int) -> subprocess.Popen:
    kv = {"kv_connector": "MooncakeConnectorV1", "kv_role": role, "kv_port": str(kv_port),
          "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 1}, "decode": {"dp_size": 1, "tp_size": 1}}}
    env = {**os.environ, "PYTHONPATH": str(REPO), "SIMCLUSTER_TIME_SCALE": scale, "SIMCLUSTER_STARTUP_S": "0"}
    return subprocess.Popen([sys.executable, "-m", "simcluster.engine", "serve", "bench-8b", "--host", HOST,
                             "--port", str(port), "--max-num-seqs", str(seqs), "--kv-transfer-config", json.dumps(kv)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def one(session, p, d, prompt, max_tokens):
    body = {"model": "bench-8b", "prompt": prompt, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}
    async with session.post(p + "/v1/completions", json=body) as r:
        params = (await r.json())["kv_transfer_params"]
    body = {"model": "bench-8b", "prompt": prompt, "max_tokens": max_tokens, "kv_transfer_params": params}
    async with session.post(d + "/v1/completions", json=body) as r:
        assert r.status == 200, await r.text()
        await r.read()


async def run(args, p, d):
    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            try:
                async with session.get(p + "/health") as r1, session.get(d + "/health") as r2:
                    if r1.status == r2.status == 200:
                        break
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
        queue = asyncio.Queue()
        for i in range(args.requests):
            queue.put_nowait(" ".join(f"q{i}w{j}" for j in range(args.prompt_tokens)))

        async def worker():
            while not queue.empty():
                await one(session, p, d, queue.get_nowait(), args.max_tokens)

        t0 = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(args.concurrency)])
        return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--time-scale", default="0")
    args = parser.parse_args()
    pp, dp = free_port(), free_port()
    procs = [start("kv_producer", pp, free_port(), args.time_scale, 64),
             start("kv_consumer", dp, free_port(), args.time_scale, 64)]
    try:
        elapsed = asyncio.run(run(args, f"http://{HOST}:{pp}", f"http://{HOST}:{dp}"))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
    print(f"{args.requests} P->D requests ({args.prompt_tokens} prompt tokens, {args.max_tokens} output tokens, "
          f"concurrency {args.concurrency}, time scale {args.time_scale}): {elapsed:.2f} s, "
          f"{args.requests / elapsed:.0f} requests/s")


if __name__ == "__main__":
    main()
