"""Where a test run's CPU goes: runs a command (e.g. `make test`) and samples every process on the machine once a
second, then prints the CPU seconds per kind of process (ais_bench, simulated engines, real vLLM, pytest workers,
Chromium, ...). The suite is CPU-bound on two cores, so its wall time follows this table, not the tests' sleeps.

    .venv/bin/python bench/suite/cpu_by_process.py -- make test

Processes that live under a second are missed; the machine's own daemons show up as `other:`. (docs/testing.md)"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import time

KINDS = (
    ("ais_bench", r"ais_bench"), ("real vLLM", r"pdcp-vllm-cpu|VLLM::"),
    ("simulated engine", r"simcluster\.engine|vllm serve"), ("pdproxy", r"pdproxy"), ("mooncake", r"mooncake"),
    ("memcached", r"memcached"), ("sshd", r"sshd"), ("chromium", r"chrom"), ("daphne", r"daphne"),
    ("celery", r"celery"), ("pytest worker", r"exec\(eval\(sys\.stdin"), ("pytest", r"pytest"),
    ("postgres", r"postgres"), ("redis", r"redis"), ("simcluster shims and cli", r"simcluster"),
    ("other python", r"python"), ("shell tools", r"^(/usr)?/bin/(ba)?sh |sha256sum|^ps |^ss "),
)
TICK = os.sysconf("SC_CLK_TCK")


def kind_of(cmdline: str) -> str:
    for kind, pattern in KINDS:
        if re.search(pattern, cmdline):
            return kind
    return "other: " + cmdline[:40]


def sample(seen: dict) -> None:
    """seen[(pid, start time)] = [cmdline, cpu seconds so far]"""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            name, fields = stat[stat.find("(") + 1:stat.rfind(")")], stat[stat.rfind(")") + 2:].split()
            cpu, key = (int(fields[11]) + int(fields[12])) / TICK, (pid, fields[19])
            if key not in seen:
                with open(f"/proc/{pid}/cmdline") as f:
                    seen[key] = [f.read().replace("\0", " ").strip() or name, cpu]
            seen[key][1] = cpu
        except (OSError, IndexError, ValueError):
            continue  # the process ended between listdir and open


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print(__doc__)
        return 2
    seen: dict = {}
    sample(seen)
    before = {key: cpu for key, (_, cpu) in seen.items()}
    started = time.monotonic()
    proc = subprocess.Popen(argv[argv.index("--") + 1:])
    while proc.poll() is None:
        sample(seen)
        time.sleep(1)
    wall = time.monotonic() - started
    total, count = collections.Counter(), collections.Counter()
    for key, (cmdline, cpu) in seen.items():
        kind = kind_of(cmdline)
        total[kind] += cpu - before.get(key, 0.0)
        count[kind] += key not in before
    used = sum(total.values()) or 1e-9
    print(f"\nexit {proc.returncode}; wall {wall:.0f} s; CPU {used:.0f} s = {used / wall:.2f} of {os.cpu_count()} cores")
    for kind, cpu in total.most_common(25):
        print(f"{cpu:8.0f} s  {100 * cpu / used:5.1f}%  {count[kind]:6d} processes  {kind}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
