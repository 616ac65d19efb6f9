"""pdproxy with 1 worker against --workers N, side by side: the same fake backends, the proxies on the same CPUs,
loaded in alternating bursts (A B B A ...). Prints per mode and concurrency the throughput, p50/p99 and the proxy's
CPU per request (utime + stime of the supervisor and every worker, warm-up included).

On a machine with more cores than the load generator needs, give the proxies several (--proxy-cpus) and the
throughput scales with the workers; on 2 cores the proxies share one CPU, so what this shows is that a request
costs no more CPU with N workers (the supervisor takes no part in serving).

    .venv/bin/python bench/proxy/workers.py                   # 1 vs 2 workers, about 40 s
    .venv/bin/python bench/proxy/workers.py --workers 4 --proxy-cpus 4-7
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import burst, cpu_plan, fake_backends, kill_all, load_average, start_proxy  # noqa: E402


def parse_cpus(text: str) -> set[int]:
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2, help="the N compared with 1 worker")
    ap.add_argument("--seconds", type=float, default=1.0, help="measured seconds per burst (plus 0.3 s warm-up)")
    ap.add_argument("--rounds", type=int, default=3, help="A B B A rounds per cell (2 bursts per side each)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--proxy-cpus", help="CPUs for both proxies, e.g. 4-7 (default: the last CPU)")
    args = ap.parse_args()
    proxy_cpus, rest_cpus, plan = cpu_plan()
    if args.proxy_cpus:
        proxy_cpus = parse_cpus(args.proxy_cpus)
        rest_cpus = set(os.sched_getaffinity(0)) - proxy_cpus or None
        plan = f"proxies pinned to CPU {sorted(proxy_cpus)}; load generator + backends on {sorted(rest_cpus or [])}"
    procs = []
    load0, t0 = load_average(), time.monotonic()
    try:
        backends = fake_backends(rest_cpus, procs)
        sides = {}
        for n in (1, args.workers):
            proc, addr = start_proxy(backends, proxy_cpus, "--workers", str(n))
            procs.append(proc)
            sides[n] = (proc, addr)
        print(f"# {plan}; {args.rounds} x ABBA bursts of {args.seconds:g} s; load average at start "
              f"{load0}")
        print("| mode | c | workers | req/s | p50 ms | p99 ms | p99/p50 | proxy CPU ms/req | CPU vs 1 worker |")
        print("|---|---|---|---|---|---|---|---|---|")
        for stream in (False, True):
            for c in args.concurrency:
                runs = {n: [] for n in sides}
                for _ in range(args.rounds):
                    for n in (1, args.workers, args.workers, 1):
                        proc, addr = sides[n]
                        runs[n].append(burst(proc, addr, stream, c, args.seconds, backends, rest_cpus))
                med = {n: {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50_ms", "p99_ms", "cpu_ms")}
                       for n, rs in runs.items()}
                for n in sides:
                    m = med[n]
                    print(f"| {'stream' if stream else 'plain'} | {c} | {n} | {m['rps']:.0f} | {m['p50_ms']:.2f} | "
                          f"{m['p99_ms']:.2f} | {m['p99_ms'] / m['p50_ms']:.2f} | {m['cpu_ms']:.3f} | "
                          f"{m['cpu_ms'] / med[1]['cpu_ms']:.2f} |", flush=True)
        print(f"# load average at end {load_average()}; took {time.monotonic() - t0:.0f} s")
    finally:
        kill_all(procs)


if __name__ == "__main__":
    main()
