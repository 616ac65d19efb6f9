"""Proxy CPU per request of two checkouts, side by side: the same fake backends, both proxies pinned to the same
CPU and loaded in alternating short bursts (A B B A ...), so that other work on the machine weighs on both
alike. For a change that should not cost speed, when run.py's sequential runs are too noisy to tell.

    .venv/bin/python bench/proxy/compare.py --base /tmp/proxy-base      # base = a `git worktree` checkout

Prints, per mode and concurrency, the median proxy CPU ms/request (utime + stime from /proc, warm-up
included) and p50 latency of each side, and this checkout's CPU as a fraction of the base's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ROOT, burst, cpu_plan, fake_backends, kill_all, start_proxy  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="root of the checkout to compare with (holds pdproxy/)")
    ap.add_argument("--seconds", type=float, default=0.7, help="measured seconds per burst (plus 0.3 s warm-up)")
    ap.add_argument("--rounds", type=int, default=4, help="A B B A rounds per cell (2 bursts per side each)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    args = ap.parse_args()
    proxy_cpus, rest_cpus, plan = cpu_plan()
    base = Path(args.base).resolve()
    procs = []
    try:
        backends = fake_backends(rest_cpus, procs)
        sides = {}
        for name, checkout in (("base", base), ("this", ROOT)):
            proc, addr = start_proxy(backends, proxy_cpus, cwd=checkout)
            procs.append(proc)
            sides[name] = (proc, addr)
        print(f"# {plan}; both proxies on the proxy CPU; {args.rounds} x ABBA bursts of {args.seconds:g} s; "
              f"load average {os.getloadavg()[0]:.2f} at start")
        print(f"{'mode':<10}{'c':>4} | {'base CPU ms/req':>15} {'this CPU ms/req':>15} {'this/base':>9} | "
              f"{'base p50 ms':>11} {'this p50 ms':>11} | {'base p99/p50':>12} {'this p99/p50':>12} | errors")
        for stream in (False, True):
            for c in args.concurrency:
                runs = {"base": [], "this": []}
                for _ in range(args.rounds):
                    for name in ("base", "this", "this", "base"):
                        runs[name].append(burst(*sides[name], stream, c, args.seconds, backends, rest_cpus))
                cpu = {k: statistics.median(r["cpu_ms"] for r in v) for k, v in runs.items()}
                p50 = {k: statistics.median(r["p50_ms"] for r in v) for k, v in runs.items()}
                tail = {k: statistics.median(r["p99_ms"] / r["p50_ms"] for r in v) for k, v in runs.items()}
                errors = sum(r["errors"] for v in runs.values() for r in v)
                print(f"{'stream' if stream else 'non-strm':<10}{c:>4} | {cpu['base']:>15.3f} {cpu['this']:>15.3f} "
                      f"{cpu['this'] / cpu['base']:>9.3f} | {p50['base']:>11.2f} {p50['this']:>11.2f} | "
                      f"{tail['base']:>12.2f} {tail['this']:>12.2f} | {errors}",
                      flush=True)
        print(f"# load average {os.getloadavg()[0]:.2f} at end")
    finally:
        kill_all(procs)


if __name__ == "__main__":
    t0 = time.monotonic()
    main()
    print(f"# took {time.monotonic() - t0:.0f} s")
