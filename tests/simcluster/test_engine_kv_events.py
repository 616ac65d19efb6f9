"""The engine publishes vLLM's KV cache events (--kv-events-config): a real engine, a real ZMQ subscriber decoding
with msgspec structs written here after vLLM 0.34's (vllm/distributed/kv_events.py), not the simulator's own.

Addresses 127.0.10.126-.128 (docs/contracts.md §2: simcluster tests use .100-.149).
"""

import concurrent.futures
import json
import subprocess
import sys
import urllib.request
from typing import Any

import msgspec
import pytest
import zmq

from simcluster.engine import textgen
from tests.ports import free_port_run
from tests.simcluster.simtest_helpers import free_port, post, sim_env, wait_http

pytestmark = pytest.mark.procs  # every test here starts processes or servers

HOST = "127.0.10.126"
BS = 128  # the simulator's block size (vllm-ascend's)


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int | bytes]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


DECODE = msgspec.msgpack.Decoder(KVEventBatch).decode


def words(seed: str, n_tokens: int) -> str:
    """A prompt of exactly n_tokens simulated tokens, distinct per seed."""
    return " ".join(f"{seed} {i}" for i in range(n_tokens // 2))


def start(spawn, tmp, kv_events: dict | str, host=HOST, extra=(), **env):
    port = free_port(host)
    config = kv_events if isinstance(kv_events, str) else json.dumps(kv_events)
    log = tmp / f"engine-{port}.log"
    proc = spawn([sys.executable, "-m", "simcluster.engine", "serve", "sim-model", "--host", host, "--port", str(port),
                  "--kv-events-config", config, *extra], sim_env(VLLM_SERVER_DEV_MODE=1, **env), log)
    wait_http(f"http://{host}:{port}/health", proc=proc)
    return f"http://{host}:{port}", log


def subscriber(endpoint: str, topic: bytes = b""):
    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, topic)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def receive(sock, batches: int, timeout_ms=5000) -> list[tuple[bytes, int, bytes]]:
    out = []
    while len(out) < batches:
        assert sock.poll(timeout_ms), f"only {len(out)} of {batches} batches arrived"
        topic, seq, payload = sock.recv_multipart()
        out.append((topic, int.from_bytes(seq, "big"), payload))
    return out


def complete(url: str, prompt: str):
    post(url + "/v1/completions", {"prompt": prompt, "max_tokens": 2})


def reset(url: str):
    req = urllib.request.Request(url + "/reset_prefix_cache", b"", method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def settle(sock, url, warmup="warm up"):
    """PUB/SUB joins late: send requests until the subscriber hears one, so nothing after it is lost."""
    for i in range(50):
        complete(url, words(f"{warmup}{i}", 2 * BS))
        if sock.poll(200):
            while sock.poll(300):
                sock.recv_multipart()
            return
    raise AssertionError("the subscriber never heard the engine")


def test_stored_removed_and_cleared_as_vllm_encodes_them(spawn, state_root):
    port = free_port(HOST)
    url, _ = start(spawn, state_root, {"enable_kv_cache_events": True, "endpoint": f"tcp://*:{port}",
                                       "topic": "kv@sim"}, extra=["--num-gpu-blocks-override", "8"])
    sock = subscriber(f"tcp://{HOST}:{port}", b"kv@sim")
    settle(sock, url)
    reset(url)
    assert isinstance(DECODE(receive(sock, 1)[0][2]).events[0], AllBlocksCleared)

    a = words("alpha", 3 * BS + 5)
    complete(url, a)
    (topic, seq_a, payload), = receive(sock, 1)
    raw = msgspec.msgpack.decode(payload)
    assert topic == b"kv@sim" and isinstance(raw, list) and raw[2] == 0  # [ts, [events], data_parallel_rank]
    assert raw[1][0]["type"] == "BlockStored" and raw[1][0]["medium"] == "GPU"  # events are tagged maps
    stored = DECODE(payload).events
    assert len(stored) == 1 and isinstance(stored[0], BlockStored)
    first = stored[0]
    assert len(first.block_hashes) == 3 and first.parent_block_hash is None and first.block_size == BS
    assert first.token_ids == textgen.tokenize(a)[:3 * BS] and first.group_idx == 0
    assert all(isinstance(h, int) and 0 <= h < 1 << 64 for h in first.block_hashes)

    complete(url, a + " " + words("beta", 2 * BS))  # the same 3 blocks, then 2 new ones
    (_, seq_b, payload), = receive(sock, 1)
    more = DECODE(payload).events[0]
    assert seq_b == seq_a + 1
    assert more.parent_block_hash == first.block_hashes[-1] and len(more.block_hashes) == 2

    complete(url, words("gamma", 4 * BS))  # 9 blocks for 8 places: the least recently used one goes
    events = DECODE(receive(sock, 1)[0][2]).events
    assert [type(e).__name__ for e in events] == ["BlockStored", "BlockRemoved"]
    held = first.block_hashes + more.block_hashes
    assert events[1].block_hashes[0] in held

    reset(url)
    assert [type(e).__name__ for e in DECODE(receive(sock, 1)[0][2]).events] == ["AllBlocksCleared"]


def test_the_replay_socket_answers_what_was_published(spawn, state_root):
    port, replay = free_port(HOST), free_port(HOST)
    url, _ = start(spawn, state_root, {"enable_kv_cache_events": True, "endpoint": f"tcp://*:{port}",
                                       "replay_endpoint": f"tcp://*:{replay}", "topic": "t"})
    sock = subscriber(f"tcp://{HOST}:{port}")
    settle(sock, url)
    for i in range(3):
        complete(url, words(f"delta{i}", BS))
    live = receive(sock, 3)
    req = zmq.Context.instance().socket(zmq.DEALER)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(f"tcp://{HOST}:{replay}")
    req.send_multipart([b"", live[1][1].to_bytes(8, "big")])
    replies = []
    while True:
        assert req.poll(3000), "the replay socket did not answer"
        frames = req.recv_multipart()
        if frames[2] == (-1).to_bytes(8, "big", signed=True):
            assert frames == [b"", b"", frames[2], b""]  # vLLM's end marker
            break
        replies.append(frames)
    assert [(f[1], int.from_bytes(f[2], "big"), f[3]) for f in replies] == [(t, s, p) for t, s, p in live[1:]]


def test_dp_ranks_publish_on_ports_offset_by_their_rank(spawn, state_root):
    host = "127.0.10.127"
    port = free_port_run(2, host)
    url, _ = start(spawn, state_root, {"enable_kv_cache_events": True, "endpoint": f"tcp://*:{port}"}, host=host,
                   extra=["-dp", "2"], ASCEND_RT_VISIBLE_DEVICES="0,1")
    socks = [subscriber(f"tcp://{host}:{port + r}") for r in (0, 1)]
    ranks = {0: set(), 1: set()}
    for i in range(40):
        with concurrent.futures.ThreadPoolExecutor(4) as pool:  # concurrent: the engine gives each to the idlest rank
            list(pool.map(lambda j, i=i: complete(url, words(f"epsilon{i}x{j}", BS)), range(4)))
        for r, sock in enumerate(socks):
            while sock.poll(50):
                ranks[r].add(DECODE(sock.recv_multipart()[2]).data_parallel_rank)
        if ranks[0] and ranks[1]:
            break
    assert ranks == {0: {0}, 1: {1}}


def listening(port: int) -> set[str]:
    """Local addresses listening on `port` (from /proc/net/tcp)."""
    out = set()
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, p = local.split(":")
        if state == "0A" and int(p, 16) == port:
            out.add(".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return out


def test_a_wildcard_endpoint_binds_the_engines_own_address_only(spawn, state_root):
    port, replay = free_port(HOST), free_port(HOST)
    _, log = start(spawn, state_root, {"enable_kv_cache_events": True, "endpoint": f"tcp://*:{port}",
                                       "replay_endpoint": f"tcp://*:{replay}"})
    assert listening(port) == {HOST} and listening(replay) == {HOST}
    assert f"binding tcp://{HOST}:{port} (the engine's --host) instead" in log.read_text()


def test_kv_event_sources_reports_each_rank_as_vllm_does(spawn, state_root):
    """GET /kv_event_sources: per DP rank the publisher's config, a tcp://*:0 endpoint as the address and port it
    bound (vLLM's ZmqEventPublisher._bind), a fixed one as configured and offset by the rank."""
    port = free_port_run(2, HOST)
    url, _ = start(spawn, state_root, {"enable_kv_cache_events": True, "endpoint": "tcp://*:0",
                                       "replay_endpoint": f"tcp://*:{port}", "topic": "kv"},
                   host=HOST, extra=["-dp", "2"], ASCEND_RT_VISIBLE_DEVICES="0,1")
    with urllib.request.urlopen(url + "/kv_event_sources", timeout=10) as answer:
        got = json.loads(answer.read())
    assert sorted(got) == ["0", "1"]
    bound = [got[r]["endpoint"] for r in ("0", "1")]
    assert all(e.startswith(f"tcp://{HOST}:") and not e.endswith(":0") for e in bound) and bound[0] != bound[1]
    assert [got[r]["replay_endpoint"] for r in ("0", "1")] == [f"tcp://*:{port}", f"tcp://*:{port + 1}"]
    assert {k: v for k, v in got["0"].items() if "endpoint" not in k} == {
        "enable_kv_cache_events": True, "publisher": "zmq", "buffer_steps": 10000, "hwm": 100000,
        "max_queue_size": 100000, "topic": "kv"}
    assert listening(int(bound[0].rsplit(":", 1)[1])) == {HOST}


def test_an_endpoint_naming_a_host_is_connected_to_as_vllm_does(spawn, state_root):
    port = free_port(HOST)
    sub = zmq.Context.instance().socket(zmq.SUB)  # the subscriber binds; the engine's PUB connects to it
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.LINGER, 0)
    sub.bind(f"tcp://{HOST}:{port}")
    try:
        url, _ = start(spawn, state_root, {"enable_kv_cache_events": True, "endpoint": f"tcp://{HOST}:{port}"})
        assert listening(port) == {HOST}  # only ours: the engine bound nothing there
        settle(sub, url)
    finally:
        sub.close()


@pytest.mark.parametrize("endpoint", ["tcp://10.1.2.3:5557", "tcp://192.168.0.1:*"])
def test_endpoints_off_loopback_are_refused_before_any_traffic(endpoint):
    done = subprocess.run([sys.executable, "-m", "simcluster.engine", "serve", "sim-model", "--host", HOST, "--port",
                           str(free_port(HOST)), "--kv-events-config",
                           json.dumps({"enable_kv_cache_events": True, "endpoint": endpoint})],
                          env=sim_env(), capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "127.0.0.0/8" in done.stderr, done.stderr


def test_a_bad_config_is_an_argument_error():
    done = subprocess.run([sys.executable, "-m", "simcluster.engine", "serve", "sim-model", "--kv-events-config",
                           '{"enable_kv_cache_events": true, "endpiont": "tcp://*:5557"}'],
                          env=sim_env(), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "endpiont: Extra inputs are not permitted" in done.stderr
