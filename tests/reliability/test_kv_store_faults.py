"""The KV pool's store under faults, with real processes: what a lost memcached server and a restarted
mooncake_master cost, measured through pdproxy -> Prefill -> Decode.

- memcached-server-lost: the memcache backend's pool (three real memcached, uhashring, the spec's default of one
  replica). One server is SIGKILLed: exactly the keys it held are lost (a miss: the Prefill recomputes those blocks,
  no request fails), and the engine's store client writes the lost and the new blocks to the live servers.
- mooncake-master-restarted: the master holds the object metadata in memory (no HA, no snapshot flags in the
  rendered command): SIGKILLed and started again on the same ports it knows no object, the store clients remount
  their segments by themselves, and puts and gets work again; requests keep answering throughout (a pool miss is
  recomputed), but for one whose pool load was in flight at the kill: an honest 502 under vLLM's default
  kv_load_failure_policy (fail). With Mooncake's snapshot and restore flags (-snapshot-restore, `make reliability`)
  the restarted master gets the segments back from the snapshot, but still no object.

Addresses 127.0.10.40-.44: memcached / master on .40-.42, the proxy on .42, Prefill .43, Decode .44.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from simcluster import profiles
from simcluster.ascendstore import AscendStore
from tests.reliability.kv_store_procs import (
    Procs,
    block_keys,
    complete,
    free_port,
    metric,
    pool_kv_config,
    prompt,
    wait_until,
    write_mmc_local_conf,
    write_mooncake_json,
)

pytestmark = pytest.mark.procs  # every test here starts processes or servers

MC_HOSTS = ("127.0.10.40", "127.0.10.41", "127.0.10.42")
SVC, PROXY_HOST, P_HOST, D_HOST = "127.0.10.40", "127.0.10.42", "127.0.10.43", "127.0.10.44"
BLOCKS = 4  # full blocks per prompt
COMMAND = 'make test PYTEST_ARGS="tests/reliability/test_kv_store_faults.py -k {}"'
HITS = "vllm:external_prefix_cache_hits_total"
BACKUPS = "simcluster:store_blocks_total"


@pytest.fixture
def procs():
    root = Path(tempfile.mkdtemp(prefix="kvfault-", dir="/tmp"))
    root.chmod(0o755)
    procs = Procs(root)
    yield procs
    procs.stop_all()
    shutil.rmtree(root, ignore_errors=True)


def request_errors(*engines: str) -> float:
    return sum(metric(e, "vllm:request_success_total", finished_reason="error") for e in engines)


def pool_warnings(procs: Procs) -> int:
    """Lines where an engine's pool client gave up (lookup, load or backup failed, blocks not stored)."""
    return sum(line.count("KV pool") for log in procs.log_dir.glob("engine-*.log")
               for line in log.read_text(errors="replace").splitlines() if "WARNING" in line)


def send_all(proxy: str, texts: list[str]) -> tuple[list[int], float]:
    statuses, slowest = [], 0.0
    for text in texts:
        t0 = time.monotonic()
        statuses.append(complete(proxy, text)[0])
        slowest = max(slowest, time.monotonic() - t0)
    return statuses, slowest


def test_memcached_server_lost(procs, figure):
    ring = [procs.memcached(host) for host in MC_HOSTS]
    servers = [address for address, _proc in ring]
    conf = write_mmc_local_conf(procs.log_dir / "mmc-local.conf", servers, replicas=1)
    p = procs.engine(P_HOST, pool_kv_config("kv_producer", free_port(P_HOST), 0, "memcache"), 0,
                     MMC_LOCAL_CONFIG_PATH=conf)
    d = procs.engine(D_HOST, pool_kv_config("kv_consumer", free_port(D_HOST), 1, "memcache"), 1,
                     MMC_LOCAL_CONFIG_PATH=conf)
    proxy = procs.proxy(PROXY_HOST, p, d)
    old = [prompt(f"old{i}w", BLOCKS) for i in range(24)]
    keys = [key for text in old for key in block_keys(text)]

    statuses, _ = send_all(proxy, old)
    assert statuses == [200] * len(old)
    wait_until(lambda: metric(p, BACKUPS, op="backup") == len(keys), what="the prompts' blocks in the pool")
    home = {key: AscendStore(servers, replicas=1).placement(key)[0] for key in keys}
    assert all(AscendStore(servers, replicas=1).get(key) for key in keys)

    dead, dead_proc = ring[1]
    procs.kill(dead_proc)
    reader = AscendStore(servers, replicas=1)
    readable = {key for key in keys if reader.get(key) is not None}
    lost = set(keys) - readable
    # Only the dead server's keys are gone, and all of them.
    assert lost and lost == {key for key in keys if home[key] == dead}
    kept_fraction = len(readable) / len(keys)

    # The same prompts again: the Prefill loads each prompt's leading blocks up to its first lost one and recomputes
    # the rest; nobody sees an error, and the blocks it lacked are written to the live servers.
    hits0, backups0 = metric(p, HITS), metric(p, BACKUPS, op="backup")
    statuses, slowest = send_all(proxy, old)
    assert statuses == [200] * len(old)
    leading = sum(next((i for i, k in enumerate(block_keys(t)) if k in lost), BLOCKS) for t in old)
    assert metric(p, HITS) - hits0 == leading * profiles.BLOCK_SIZE
    wait_until(lambda: metric(p, BACKUPS, op="backup") - backups0 == len(lost), what="the lost blocks written again")
    assert all(reader.get(key) for key in keys)

    # New prompts: every block is stored, those whose home is the dead server on the next server of the ring.
    new = [prompt(f"new{i}w", BLOCKS) for i in range(12)]
    new_keys = [key for text in new for key in block_keys(text)]
    backups1 = metric(p, BACKUPS, op="backup")
    statuses, _ = send_all(proxy, new)
    assert statuses == [200] * len(new)
    wait_until(lambda: metric(p, BACKUPS, op="backup") - backups1 == len(new_keys), what="the new prompts' blocks")
    assert all(reader.get(key) for key in new_keys)
    rehashed = sum(AscendStore(servers, replicas=1).placement(key)[0] == dead for key in new_keys)
    assert rehashed > 0

    # Everything is a pool hit again.
    hits1 = metric(p, HITS)
    statuses, _ = send_all(proxy, old + new)
    assert statuses == [200] * len(old + new)
    assert metric(p, HITS) - hits1 == len(keys + new_keys) * profiles.BLOCK_SIZE
    errors, warnings = request_errors(p, d), pool_warnings(procs)
    assert errors == 0 and warnings == 0
    sent = 3 * len(old) + 2 * len(new)
    figure("memcached-server-lost",
           held=f"{sent} requests through pdproxy, all 200, 0 engine request errors; after one of 3 memcached "
                "(1 replica) was SIGKILLed exactly the keys hashed to it were unreadable; the Prefill loaded each "
                "prompt's blocks up to the first lost one and recomputed the rest; the lost and the new blocks were "
                "written to the 2 live servers and read back",
           figure=f"{len(readable)} of {len(keys)} stored blocks still readable ({kept_fraction:.0%}; 2/3 expected), "
                  f"the {len(lost)} lost all on the dead server; replay pool hits {leading} of {len(keys)} blocks, "
                  f"slowest request {slowest * 1000:.0f} ms; {len(lost)} lost + {len(new_keys)} new blocks written "
                  f"({rehashed} of them rehashed off the dead server), 100% readable afterwards; 0 errors",
           command=COMMAND.format("memcached"),
           values={"stored_blocks": len(keys), "readable_after_kill": len(readable), "kept_fraction": kept_fraction,
                   "lost_blocks": len(lost), "replay_hit_blocks": leading, "replay_slowest_s": slowest,
                   "rewritten_blocks": len(lost), "new_blocks": len(new_keys), "new_blocks_rehashed": rehashed,
                   "requests": sent, "non_200": 0, "engine_errors": errors, "pool_warnings": warnings})


class Load:
    """Requests one after another through the proxy in a thread: (start time, status, seconds) of each."""

    def __init__(self, proxy: str, texts: list[str]):
        self.proxy, self.texts = proxy, texts
        self.results: list[tuple[float, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        i = 0
        while not self._stop.is_set():
            t0 = time.monotonic()
            status, _body = complete(self.proxy, self.texts[i % len(self.texts)])
            self.results.append((t0, status, time.monotonic() - t0))
            i += 1
            time.sleep(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(60)


@pytest.mark.parametrize("snapshot", [False, pytest.param(True, marks=pytest.mark.reliability)],
                         ids=["rendered-flags", "snapshot-restore"])
def test_mooncake_master_restarted(procs, figure, snapshot):
    rpc_port, metrics_port = free_port(SVC), free_port(SVC)
    snapshots = procs.log_dir / "snapshots" if snapshot else None
    if snapshots:
        snapshots.mkdir()
    master = procs.mooncake_master(SVC, rpc_port, metrics_port, snapshots)
    master_metrics = f"http://{SVC}:{metrics_port}/metrics"
    config = write_mooncake_json(procs.log_dir / "mooncake.json", f"{SVC}:{rpc_port}")
    p = procs.engine(P_HOST, pool_kv_config("kv_producer", free_port(P_HOST), 0, "mooncake"), 0,
                     MOONCAKE_CONFIG_PATH=config)
    d = procs.engine(D_HOST, pool_kv_config("kv_consumer", free_port(D_HOST), 1, "mooncake"), 1,
                     MOONCAKE_CONFIG_PATH=config)
    proxy = procs.proxy(PROXY_HOST, p, d)
    capacity = metric(master_metrics, "master_total_capacity_bytes")
    assert capacity > 0

    stored = [prompt(f"old{i}w", BLOCKS) for i in range(8)]
    statuses, _ = send_all(proxy, stored)
    assert statuses == [200] * len(stored)
    wait_until(lambda: metric(master_metrics, "master_key_count") == len(stored) * BLOCKS, what="the blocks stored")
    if snapshots:  # a snapshot written after the blocks were stored
        stored_at = time.time()
        wait_until(lambda: any(f.stat().st_mtime > stored_at for f in snapshots.rglob("latest.txt")), timeout=30,
                   what="a snapshot of the stored blocks")
    hits0 = metric(p, HITS)
    assert complete(proxy, stored[0])[0] == 200
    assert metric(p, HITS) - hits0 == BLOCKS * profiles.BLOCK_SIZE  # the pool serves before the fault

    # Load on half of the stored prompts and on fresh ones, through the kill and the restart; the other half stays
    # untouched until the end.
    used, untouched = stored[:4], stored[4:]
    fresh = [prompt(f"load{i}w", BLOCKS) for i in range(40)]
    with Load(proxy, [t for pair in zip(used * 10, fresh, strict=False) for t in pair]) as load:
        time.sleep(1.0)
        kill_sent = time.monotonic()
        procs.kill(master)
        killed = time.monotonic()
        time.sleep(0.3)  # the request in flight at the kill is over
        hits_at_kill = metric(p, HITS)
        time.sleep(1.7)
        procs.mooncake_master(SVC, rpc_port, metrics_port, snapshots)
        up, hits_while_down = time.monotonic(), metric(p, HITS) - hits_at_kill
        keys_after_restart = metric(master_metrics, "master_key_count")
        wait_until(lambda: metric(master_metrics, "master_total_capacity_bytes") == capacity, timeout=30,
                   what="both store clients' segments mounted again")
        remounted = time.monotonic()
        wait_until(lambda: metric(master_metrics, "master_key_count") > 0, timeout=30, what="a put after the restart")
        first_put = time.monotonic()
        time.sleep(1.0)

    # Nothing survived: each untouched prompt is a pool miss (recomputed), then stored again and served from the pool.
    def pool_hits(text):
        before = metric(p, HITS)
        assert complete(proxy, text)[0] == 200
        return metric(p, HITS) - before

    assert [pool_hits(text) for text in untouched] == [0] * len(untouched)
    for text in untouched:
        wait_until(lambda t=text: pool_hits(t) == BLOCKS * profiles.BLOCK_SIZE, timeout=20, tick=0.2,
                   what="a re-stored prompt served from the pool")

    # Every request answered, except one in flight at the kill whose pool load failed: under vLLM's default
    # kv_load_failure_policy (fail) that is a 500 from the Prefill, which the proxy answers honestly with a 502.
    straddling = [r for r in load.results if r[0] < killed and r[0] + r[2] > kill_sent]
    down = [r for r in load.results if killed <= r[0] < up]
    failed = [r for r in load.results if r[1] != 200]
    errors = request_errors(p, d)
    assert load.results and down and hits_while_down == 0
    assert all(r in straddling and r[1] == 502 for r in failed) and errors == len(failed), (failed, errors)
    remount_s, put_s = remounted - up, first_put - up
    assert remount_s < 10 and put_s < 10  # the bound; the clients ping the master about once a second
    slowest_down = max(r[2] for r in down)
    warnings = pool_warnings(procs)
    objects = len(stored) * BLOCKS
    why_lost = "the snapshot restored the segments, no object" if snapshot else "master metadata in memory, no HA"
    remount = "restored from the snapshot" if snapshot else "the clients remounted them by themselves"
    variant = ("with -enable_snapshot/-enable_snapshot_restore (a snapshot every second, local store)" if snapshot
               else "with the rendered flags")
    figure("mooncake-master-restarted" + ("-snapshot-restore" if snapshot else ""),
           held=f"{len(load.results)} requests through pdproxy during the SIGKILL and restart of mooncake_master "
                f"{variant} "
                f"({len(down)} started while it was down: cache misses, recomputed, all 200); the only failures "
                "allowed, requests in flight at the kill, answered 502 (vLLM's default kv_load_failure_policy "
                f"fail), as many as the engines' error count ({len(failed)} this run); the restarted master knew none "
                f"of the {objects} objects (the {len(untouched) * BLOCKS} untouched ones missed, then were stored "
                f"and served again); both store clients' segments back ({remount}), no engine restarted, puts "
                "within the 10 s bound",
           figure=f"0 of {objects} objects survived ({why_lost}); down {up - killed:.1f} s; "
                  f"segments remounted {remount_s:.1f} s and the first put stored {put_s:.1f} s after the new "
                  f"master answered ({first_put - killed:.1f} s after the kill); requests while down answered, "
                  f"slowest {slowest_down * 1000:.0f} ms; {len(failed)} errors of {len(load.results)} requests; "
                  f"{warnings} pool warnings logged (puts refused while down)",
           command=('make reliability PYTEST_ARGS="-k snapshot-restore"' if snapshot
                    else COMMAND.format("rendered-flags")),
           values={"objects_before": objects, "objects_after_restart": keys_after_restart,
                   "untouched_objects_lost": len(untouched) * BLOCKS, "down_s": up - killed,
                   "remount_s": remount_s, "first_put_s": put_s, "kill_to_first_put_s": first_put - killed,
                   "requests": len(load.results), "requests_while_down": len(down),
                   "pool_hits_while_down": hits_while_down, "slowest_while_down_s": slowest_down,
                   "in_flight_at_kill": len(straddling), "failed": len(failed), "engine_errors": errors,
                   "pool_warnings": warnings})
