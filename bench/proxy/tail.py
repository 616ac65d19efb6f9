"""Where the proxy's tail latency comes from: open-loop runs (openloop_gen.py) at fixed rates below saturation,
direct and through the proxy side by side, beside the closed-loop c=64 run the issue measured. A closed loop at
saturation mixes the proxy's tail with the load generator's own queueing; an open loop below saturation shows
what a request waits in the proxy alone (latency counted from when the request was due).

    .venv/bin/python bench/proxy/tail.py                 # about 60 s
    .venv/bin/python bench/proxy/tail.py --proxy-arg=--workers --proxy-arg=2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import PY, ROOT, _pin, cpu_plan, fake_backends, kill_all, load, load_average, start_proxy  # noqa: E402


def open_loop(mode, rate, seconds, addrs, cpus) -> dict:
    argv = [PY, str(ROOT / "bench/proxy/openloop_gen.py"), "--mode", mode, "--rate", str(rate), "--seconds",
            str(seconds), "--proxy", addrs["proxy"], "--prefill", addrs["prefill"], "--decode", addrs["decode"]]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=seconds + 60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=_pin(cpus))
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5, 0.75])
    ap.add_argument("--proxy-arg", action="append", default=[], help="extra pdproxy flag (repeatable)")
    args = ap.parse_args()
    proxy_cpus, rest_cpus, plan = cpu_plan()
    procs = []
    load0, t0 = load_average(), time.monotonic()
    try:
        addrs = fake_backends(rest_cpus, procs)
        px, addrs["proxy"] = start_proxy(addrs, proxy_cpus, *args.proxy_arg)
        procs.append(px)
        closed = [load("proxy", 64, False, 1.5, addrs, rest_cpus) for _ in range(args.repeat)]
        sat = statistics.median(r["rps"] for r in closed)
        c50 = statistics.median(r["p50_ms"] for r in closed)
        c99 = statistics.median(r["p99_ms"] for r in closed)
        print(f"# {plan}; proxy flags {' '.join(args.proxy_arg) or '(none)'}; load average at start "
              f"{load0}")
        print(f"# closed loop, c=64, non-streaming, through the proxy: {sat:.0f} req/s, p50 {c50:.2f} ms, "
              f"p99 {c99:.2f} ms, p99/p50 {c99 / c50:.2f}")
        print("| open loop rate | side | p50 ms | p90 ms | p99 ms | p99.9 ms | p99/p50 | late starts |")
        print("|---|---|---|---|---|---|---|---|")
        for frac in args.fractions:
            rate = round(sat * frac)
            runs = {"direct": [], "proxy": []}
            for _ in range(args.repeat):
                for side in ("direct", "proxy"):
                    runs[side].append(open_loop(side, rate, args.seconds, addrs, rest_cpus))
            for side, rs in runs.items():
                m = {k: statistics.median(r[k] for r in rs) for k in ("p50_ms", "p90_ms", "p99_ms", "p999_ms",
                                                                      "late_starts")}
                print(f"| {rate}/s ({frac:.0%} of saturation) | {side} | {m['p50_ms']:.2f} | {m['p90_ms']:.2f} | "
                      f"{m['p99_ms']:.2f} | {m['p999_ms']:.2f} | {m['p99_ms'] / m['p50_ms']:.2f} | "
                      f"{m['late_starts']:.0f} |", flush=True)
        print(f"# load average at end {load_average()}; took {time.monotonic() - t0:.0f} s")
    finally:
        kill_all(procs)


if __name__ == "__main__":
    main()
