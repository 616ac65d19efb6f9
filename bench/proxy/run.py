"""Direct vs through pdproxy, side by side in one run on the same fake backends.

Starts one fake Prefill, one fake Decode (tests/pdproxy/fake_backend.py) and the proxy, then for streaming and
non-streaming at c = 1, 16, 64 runs the load generator (its own process) directly (it makes both PD legs
itself: the floor any PD proxy must pay) and through the proxy. Prints added latency p50/p99, the throughput
ratio and the proxy's CPU per request read from /proc/<pid>/stat.

    .venv/bin/python bench/proxy/run.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")


def spawn(argv, prefix):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                            start_new_session=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            line = proc.stdout.readline()
            if line.startswith(prefix):
                return proc, line.strip()
        if proc.poll() is not None:
            break
    raise RuntimeError(f"{argv} did not start")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def load(mode, c, stream, seconds, addrs):
    argv = [PY, str(ROOT / "bench/proxy/loadgen.py"), "--mode", mode, "--concurrency", str(c),
            "--seconds", str(seconds), "--proxy", addrs["proxy"], "--prefill", addrs["prefill"],
            "--decode", addrs["decode"]] + (["--stream"] if stream else [])
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=seconds + 30,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    args = ap.parse_args()
    procs = []
    try:
        fake = str(ROOT / "tests/pdproxy/fake_backend.py")
        p, line = spawn([PY, fake, "--name", "p", "--no-record"], "PORT")
        procs.append(p)
        p_addr = f"127.0.0.1:{line.split()[1]}"
        d, line = spawn([PY, fake, "--name", "d", "--no-record", "--chunks", "16"], "PORT")
        procs.append(d)
        d_addr = f"127.0.0.1:{line.split()[1]}"
        px, line = spawn([PY, "-m", "pdproxy", "--host", "127.0.0.1", "--port", "0", "--prefill", p_addr,
                          "--decode", d_addr, "--log-level", "WARNING"], "pdproxy listening")
        procs.append(px)
        addrs = {"prefill": p_addr, "decode": d_addr, "proxy": line.rsplit("//", 1)[1]}
        rows = []
        for stream in (False, True):
            for c in args.concurrency:
                direct = load("direct", c, stream, args.seconds, addrs)
                cpu0 = cpu_seconds(px.pid)
                via = load("proxy", c, stream, args.seconds, addrs)
                cpu = cpu_seconds(px.pid) - cpu0
                # the loadgen's warm-up requests also went through the proxy: count them at the same rate
                total_reqs = via["requests"] * (1 + 0.5 / args.seconds)
                rows.append((stream, c, direct, via, cpu / total_reqs * 1e3))
                print(f"  done stream={stream} c={c}", file=sys.stderr, flush=True)
        hdr = (f"{'mode':<10}{'c':>4} | {'direct p50/p99 ms':>18} | {'proxy p50/p99 ms':>17} | "
               f"{'added p50/p99 ms':>17} | {'direct rps':>10} {'proxy rps':>10} {'ratio':>6} | "
               f"{'proxy CPU ms/req':>16} | {'p99/p50':>7} | errors")
        print(hdr)
        print("-" * len(hdr))
        for stream, c, direct, via, cpu in rows:
            print(f"{'stream' if stream else 'non-strm':<10}{c:>4} | "
                  f"{direct['p50_ms']:>8.2f} / {direct['p99_ms']:>7.2f} | "
                  f"{via['p50_ms']:>7.2f} / {via['p99_ms']:>7.2f} | "
                  f"{via['p50_ms'] - direct['p50_ms']:>+7.2f} / {via['p99_ms'] - direct['p99_ms']:>+7.2f} | "
                  f"{direct['rps']:>10.0f} {via['rps']:>10.0f} {via['rps'] / direct['rps']:>6.2f} | "
                  f"{cpu:>16.3f} | {via['p99_ms'] / via['p50_ms']:>7.2f} | {direct['errors'] + via['errors']}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)


if __name__ == "__main__":
    main()
