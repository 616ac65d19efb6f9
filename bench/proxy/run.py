"""Direct vs through pdproxy, side by side in one run on the same fake backends.

Starts one fake Prefill, one fake Decode (tests/pdproxy/fake_backend.py) and the proxy, then for streaming and
non-streaming at c = 1, 16, 64 runs the load generator (its own process) directly (it makes both PD legs
itself: the floor any PD proxy must pay) and through the proxy. Prints added latency p50/p99, the throughput
ratio and the proxy's CPU per request read from /proc/<pid>/stat (utime + stime over every request it served:
the figure least disturbed by other work on the machine).

On 2+ cores the proxy runs alone on the last CPU and the load generator and both fake backends share the
others, for the direct runs as well, so that both sides of the comparison get the same cores. Each cell is
run --repeat times (direct and proxy interleaved) and each figure is the median; the load average at the
start and end is printed, since other engineers' tests on the same machine skew latency.

    .venv/bin/python bench/proxy/run.py                 # 1.5 s x 3 per cell, about 80 s in all
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")


def cpu_plan():
    """(proxy CPUs, generator+backends CPUs, description). Proxy alone on one core, the rest on the other(s):
    the proxy can neither steal nor be robbed of the generator's CPU, and the direct run uses the same cores."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None, None, "no pinning (sched_setaffinity unavailable)"
    if len(cpus) < 2:
        return None, None, f"no pinning (only CPU {cpus} available)"
    proxy, rest = {cpus[-1]}, set(cpus[:-1])
    return proxy, rest, (f"proxy pinned to CPU {sorted(proxy)}; load generator + fake Prefill/Decode pinned to "
                         f"CPU {sorted(rest)} (direct runs too)")


def _pin(cpus):
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def spawn(argv, prefix, cpus, cwd=ROOT):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=cwd,
                            start_new_session=True, preexec_fn=_pin(cpus))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            line = proc.stdout.readline()
            if line.startswith(prefix):
                return proc, line.strip()
        if proc.poll() is not None:
            break
    if proc.poll() is None:  # never leave behind what did not start
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    raise RuntimeError(f"{argv} did not start")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its children (a proxy with --workers N: the supervisor and its workers)."""
    pids = [pid] + [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                    for c in (task / "children").read_text().split()]
    return sum(cpu_seconds(p) for p in pids)


def fake_backends(cpus, procs: list) -> dict:
    """One fake Prefill and one fake Decode (tests/pdproxy/fake_backend.py) on `cpus`, added to `procs`."""
    fake = str(ROOT / "tests/pdproxy/fake_backend.py")
    p, line = spawn([PY, fake, "--name", "p", "--no-record"], "PORT", cpus)
    d, dline = spawn([PY, fake, "--name", "d", "--no-record", "--chunks", "16"], "PORT", cpus)
    procs += [p, d]
    return {"prefill": f"127.0.0.1:{line.split()[1]}", "decode": f"127.0.0.1:{dline.split()[1]}"}


def start_proxy(backends: dict, cpus, *flags: str, cwd=ROOT):
    """pdproxy of the checkout at `cwd` (`-m` imports the one it starts in) over `backends`: (process, host:port)."""
    argv = [PY, "-m", "pdproxy", "--host", "127.0.0.1", "--port", "0", "--prefill", backends["prefill"],
            "--decode", backends["decode"], "--log-level", "WARNING", *flags]
    proc, line = spawn(argv, "pdproxy listening", cpus, cwd=cwd)
    return proc, line.rsplit("//", 1)[1]


def burst(proxy, addr, stream, c, seconds, backends, cpus) -> dict:
    """One closed-loop run through `proxy`, with its CPU (and its workers') per request, warm-up included."""
    cpu0 = tree_cpu_seconds(proxy.pid)
    out = load("proxy", c, stream, seconds, {**backends, "proxy": addr}, cpus)
    out["cpu_ms"] = (tree_cpu_seconds(proxy.pid) - cpu0) / out["all_requests"] * 1e3
    return out


def kill_all(procs: list) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def load(mode, c, stream, seconds, addrs, cpus):
    argv = [PY, str(ROOT / "bench/proxy/loadgen.py"), "--mode", mode, "--concurrency", str(c),
            "--seconds", str(seconds), "--proxy", addrs["proxy"], "--prefill", addrs["prefill"],
            "--decode", addrs["decode"]] + (["--stream"] if stream else [])
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=seconds + 30,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=_pin(cpus))
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median_run(runs: list[dict]) -> dict:
    """Per-figure median over the repeats (each figure on its own: a slow run does not drag the others)."""
    keys = ("p50_ms", "p99_ms", "rps", "cpu_ms")
    out = {k: statistics.median(r[k] for r in runs) for k in keys if k in runs[0]}
    out["errors"] = sum(r["errors"] for r in runs)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.5, help="measured seconds per run (plus 0.3 s warm-up)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell, direct and proxy interleaved; medians")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--no-pin", action="store_true", help="let the scheduler place every process")
    args = ap.parse_args()
    proxy_cpus, rest_cpus, plan = (None, None, "no pinning (--no-pin)") if args.no_pin else cpu_plan()
    load0 = os.getloadavg()
    t_start = time.monotonic()
    procs = []
    try:
        fake = str(ROOT / "tests/pdproxy/fake_backend.py")
        p, line = spawn([PY, fake, "--name", "p", "--no-record"], "PORT", rest_cpus)
        procs.append(p)
        p_addr = f"127.0.0.1:{line.split()[1]}"
        d, line = spawn([PY, fake, "--name", "d", "--no-record", "--chunks", "16"], "PORT", rest_cpus)
        procs.append(d)
        d_addr = f"127.0.0.1:{line.split()[1]}"
        px, line = spawn([PY, "-m", "pdproxy", "--host", "127.0.0.1", "--port", "0", "--prefill", p_addr,
                          "--decode", d_addr, "--log-level", "WARNING"], "pdproxy listening", proxy_cpus)
        procs.append(px)
        addrs = {"prefill": p_addr, "decode": d_addr, "proxy": line.rsplit("//", 1)[1]}
        rows = []
        for stream in (False, True):
            for c in args.concurrency:
                directs, vias = [], []
                for _ in range(args.repeat):
                    directs.append(load("direct", c, stream, args.seconds, addrs, rest_cpus))
                    cpu0 = cpu_seconds(px.pid)
                    via = load("proxy", c, stream, args.seconds, addrs, rest_cpus)
                    # every request the proxy served in that window, warm-up included
                    via["cpu_ms"] = (cpu_seconds(px.pid) - cpu0) / via["all_requests"] * 1e3
                    vias.append(via)
                rows.append((stream, c, _median_run(directs), _median_run(vias)))
                print(f"  done stream={stream} c={c}", file=sys.stderr, flush=True)
        print_table(args, plan, load0, t_start, rows)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)


def print_table(args, plan: str, load0, t_start: float, rows: list):
    load1 = os.getloadavg()
    print(f"# pdproxy bench: {args.seconds:g} s per run, median of {args.repeat} (direct/proxy interleaved); "
          f"{os.cpu_count()} CPUs; {plan}")
    print(f"# load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, at end "
          f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} (other work on the machine skews latency, "
          f"far less the proxy CPU/request from /proc/<pid>/stat utime+stime); "
          f"took {time.monotonic() - t_start:.0f} s")
    hdr = (f"{'mode':<10}{'c':>4} | {'direct p50/p99 ms':>18} | {'proxy p50/p99 ms':>17} | "
           f"{'added p50/p99 ms':>17} | {'direct rps':>10} {'proxy rps':>10} {'ratio':>6} | "
           f"{'proxy CPU ms/req':>16} | {'p99/p50':>7} | errors")
    print(hdr)
    print("-" * len(hdr))
    for stream, c, direct, via in rows:
        print(f"{'stream' if stream else 'non-strm':<10}{c:>4} | "
              f"{direct['p50_ms']:>8.2f} / {direct['p99_ms']:>7.2f} | "
              f"{via['p50_ms']:>7.2f} / {via['p99_ms']:>7.2f} | "
              f"{via['p50_ms'] - direct['p50_ms']:>+7.2f} / {via['p99_ms'] - direct['p99_ms']:>+7.2f} | "
              f"{direct['rps']:>10.0f} {via['rps']:>10.0f} {via['rps'] / direct['rps']:>6.2f} | "
              f"{via['cpu_ms']:>16.3f} | {via['p99_ms'] / via['p50_ms']:>7.2f} | "
              f"{direct['errors'] + via['errors']}")


if __name__ == "__main__":
    main()
