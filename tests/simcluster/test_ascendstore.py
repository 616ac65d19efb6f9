"""AscendStore on three real memcached servers: 3 replicas survive a lost server. (Engines use it as the memcache
backend's stand-in: tests/simcluster/test_pool_connectors.py.)"""

import os
import signal
import threading
import time

import pytest

from simcluster.ascendstore import AscendStore
from tests.simcluster.simtest_helpers import free_port

HOST = "127.0.10.115"


def start_memcached(spawn, tmp, n=3):
    servers = []
    for _ in range(n):
        port = free_port(HOST)
        proc = spawn(["memcached", "-l", HOST, "-p", str(port), "-U", "0", "-m", "16", "-u", "root"], None,
                     tmp / f"mc-{port}.log")
        servers.append((f"{HOST}:{port}", proc))
    time.sleep(0.3)
    return servers


@pytest.mark.procs
def test_losing_one_server_loses_no_block(spawn, state_root):
    servers = start_memcached(spawn, state_root)
    store = AscendStore([s for s, _ in servers], replicas=3)
    blocks = {f"blk{i}": bytes([i]) * 1000 for i in range(60)}
    assert all(store.put(k, v) == 3 for k, v in blocks.items())
    servers[1][1].kill()
    servers[1][1].wait(5)
    assert all(store.get(k) == v for k, v in blocks.items())
    assert store.put("after", b"x") == 2


def test_placement_uses_distinct_servers_and_spreads_primaries(spawn, state_root):
    store = AscendStore([f"{HOST}:{p}" for p in (1, 2, 3, 4)], replicas=3)
    placements = [store.placement(f"k{i}") for i in range(400)]
    assert all(len(set(p)) == 3 for p in placements)
    primaries = {p[0] for p in placements}
    assert len(primaries) == 4


@pytest.mark.procs
def test_a_server_that_answers_late_keeps_its_replicas(spawn, state_root):
    """A loaded machine stalled a memcached past the client's old 0.5 s timeout: it was marked down, and every block
    of the next 2 s went to the other server only (test_pool_connectors.py then counted [0, 8] replicas, not
    [8, 8]). A server that answers within the timeout keeps its replica."""
    servers = start_memcached(spawn, state_root, n=2)
    store = AscendStore([s for s, _ in servers], replicas=2)
    assert store.put("warm", b"x") == 2  # both connections open
    slow = servers[0][1]
    os.kill(slow.pid, signal.SIGSTOP)
    wake = threading.Timer(1.0, os.kill, (slow.pid, signal.SIGCONT))
    wake.start()
    try:
        stored = store.put("late", b"y" * 1000)
    finally:
        wake.join()
        os.kill(slow.pid, signal.SIGCONT)
    assert stored == 2
    assert store.put("next", b"z") == 2
