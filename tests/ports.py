"""Ports for the servers the tests start (and for addresses nothing may listen on).

A port the kernel chose for bind(port 0) and that was then released is an ephemeral port: any outgoing connection on
the machine may take it before the server binds it. A loaded two-worker run lost a test that way ("address already in
use", docs/testing.md). So the tests pick from below the kernel's ephemeral range (ip_local_port_range starts at
32768), which no outgoing connection is given; each xdist worker has a stripe of its own, a port is handed out once
per session (from a random start), and only if it binds now. The simulated cluster's fixed ports start at 20000 (simcluster/), above the
stripes."""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading

LOW, HIGH = 12000, 20000
FIXED_ELSEWHERE = {12321}  # the dp_rpc_port of the example topologies


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(n) for n in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def worker_stripe(worker: str | None, workers: int) -> range:
    """This worker's share of LOW..HIGH: gw0 the first, gw1 the next; the whole span without xdist."""
    index = int(worker[2:]) if worker and worker.startswith("gw") else 0
    size = (HIGH - LOW) // max(workers, 1)
    return range(LOW + index * size, LOW + (index + 1) * size)


_stripe = worker_stripe(os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
# a start of its own per session: two sessions at once (a side run beside the suite) seldom walk the same ports
_next = itertools.count(random.randrange(len(_stripe)))
_lock = threading.Lock()
assert _stripe.stop <= _ephemeral_range()[0], "the test port stripes must lie below the kernel's ephemeral ports"


def binds(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port of this worker's stripe that binds on host now and that no other test of the session was given."""
    for _ in range(len(_stripe)):
        with _lock:
            port = _stripe[next(_next) % len(_stripe)]
        if port not in FIXED_ELSEWHERE and binds(host, port):
            return port
    raise RuntimeError(f"no free port left in {_stripe.start}-{_stripe.stop - 1} on {host}")


def free_port_run(count: int, host: str = "127.0.0.1") -> int:
    """The first of `count` consecutive ports of this worker's stripe that all bind on host now (a server that
    listens on port + rank, as vLLM's data-parallel ranks publish their KV events), none given to another test."""
    for _ in range(len(_stripe)):
        with _lock:
            first = _stripe[next(_next) % len(_stripe)]
            for _ in range(count - 1):
                next(_next)
        ports = range(first, first + count)
        if ports[-1] < _stripe.stop and not FIXED_ELSEWHERE.intersection(ports) and all(binds(host, p) for p in ports):
            return first
    raise RuntimeError(f"no {count} consecutive free ports left in {_stripe.start}-{_stripe.stop - 1} on {host}")
