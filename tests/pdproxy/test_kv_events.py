"""cache_aware's exact view (pdproxy/kv_index.py, kv_events.py): real simulated engines publish their KV cache
events, the real proxy subscribes and tokenizes with the simulated model's tokenizer directory."""

import json
import os
import signal
import subprocess
import time

import pytest

from simcluster import nodestate
from tests.pdproxy.proxy_procs import PY, ROOT, FakeBackend, request, wait_until
from tests.pdproxy.proxy_procs import kv_blocks as blocks_in
from tests.ports import free_port

MODEL = "sim-model"
BS = 128


class Engine(FakeBackend):
    def __init__(self, proc, port, name, events, replay, kv_port):
        super().__init__(proc, port, name)
        self.events, self.replay, self.kv_port = events, replay, kv_port

    @property
    def spec(self) -> str:
        return f"{self.addr}=tcp://127.0.0.1:{self.events}" + (f"|tcp://127.0.0.1:{self.replay}" if self.replay else "")


def engine(cluster, role="prefill", *, replay=True, events=True, node_dir=None, ports=None) -> Engine:
    """A simcluster engine publishing KV cache events on 127.0.0.1 (tcp://*:PORT: it binds its --host)."""
    port, kv_port, ev, rp = ports or (free_port(), free_port(), free_port(), free_port() if replay else None)
    kv = {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
          "kv_port": str(kv_port), "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 1},
                                                                 "decode": {"dp_size": 1, "tp_size": 1}}}
    argv = [PY, "-m", "simcluster.engine", "serve", MODEL, "--host", "127.0.0.1", "--port", str(port), "-tp", "1",
            "--served-model-name", MODEL, "--kv-transfer-config", json.dumps(kv), "--num-gpu-blocks-override", "12"]
    if events:
        config = {"enable_kv_cache_events": True, "endpoint": f"tcp://*:{ev}"}
        if rp is not None:
            config["replay_endpoint"] = f"tcp://*:{rp}"
        argv += ["--kv-events-config", json.dumps(config)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ASCEND_RT_VISIBLE_DEVICES": "0", "SIMCLUSTER_TIME_SCALE": "0.05",
           "SIMCLUSTER_STARTUP_S": "0.1", "VLLM_SERVER_DEV_MODE": "1", "PYTHONHASHSEED": "0"}
    if node_dir:
        env["SIMCLUSTER_NODE_DIR"] = str(node_dir)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env,
                            start_new_session=True)
    cluster.procs.append(proc)
    eng = Engine(proc, port, f"{role}-{port}", ev, rp, kv_port)
    assert wait_until(lambda: _healthy(eng.url), timeout=60), f"engine {eng.addr} did not start"  # a deadline
    return eng


def _healthy(url) -> bool:
    try:
        return request("GET", url + "/health", timeout=1)[0] == 200
    except OSError:
        return False


def doc(name: str, blocks: int) -> str:
    """A prompt of `blocks` full blocks and a few tokens more, in words the simulated tokenizer knows."""
    return " ".join(f"{name} {i % 150}" for i in range(blocks * BS // 2 + 3))  # words and ids both know


def ask(url: str, prompt: str, **kw):
    return request("POST", url + "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 2, **kw},
                   timeout=20)


def kv_blocks(proxy) -> dict[str, float]:
    return blocks_in(proxy.metrics())


def picks(proxy, reason) -> float:
    return proxy.metric("pdproxy_cache_aware_picks_total", role="prefill", reason=reason)


def kv_proxy(cluster, ps, d, tokenizer, specs=None):
    proxy = cluster.proxy(ps, [d], "--prefill-policy", "cache_aware", "--decode-policy", "least_conn",
                          "--tokenizer", tokenizer, "--kv-events", *(specs or [p.spec for p in ps]))
    assert wait_until(lambda: kv_blocks(proxy).keys() == {p.addr for p in ps if p.events}, timeout=10), \
        kv_blocks(proxy)
    return proxy


@pytest.mark.procs
def test_a_prompt_goes_where_the_events_say_its_blocks_are(cluster, tokenizer):
    ps = [engine(cluster) for _ in range(3)]
    d = engine(cluster, "decode", events=False)
    proxy = kv_proxy(cluster, ps, d, tokenizer)
    holder = ps[2]  # with no view at all the emptiest instance would be the first
    alpha = doc("alpha", 6)
    assert ask(holder.url, alpha)[0] == 200  # straight to the engine: the proxy routed nothing
    assert wait_until(lambda: kv_blocks(proxy)[holder.addr] == 6, timeout=5), kv_blocks(proxy)

    status, headers, _ = proxy.post("/v1/completions", {"model": MODEL, "prompt": alpha + " sim token",
                                                        "max_tokens": 2})
    assert status == 200 and headers["x-pd-prefill"] == holder.addr
    assert picks(proxy, "kv_events") == 1

    # 12 blocks per engine: 8 more on the holder evict alpha's oldest blocks, and the events say so
    assert ask(holder.url, doc("beta", 8))[0] == 200
    assert wait_until(lambda: kv_blocks(proxy)[holder.addr] == 12, timeout=5), kv_blocks(proxy)
    status, headers, _ = proxy.post("/v1/completions", {"model": MODEL, "prompt": alpha + " gamma",
                                                        "max_tokens": 2})
    # the approximate view alone would still send alpha to the holder; the events say its first block is gone
    assert status == 200 and headers["x-pd-prefill"] != holder.addr
    assert picks(proxy, "fewest") == 1 and picks(proxy, "cache") == 0

    request("POST", holder.url + "/reset_prefix_cache", b"")
    assert wait_until(lambda: kv_blocks(proxy)[holder.addr] == 0, timeout=5), kv_blocks(proxy)


@pytest.mark.procs
def test_chat_prompts_are_rendered_with_the_chat_template(cluster, tokenizer):
    ps = [engine(cluster) for _ in range(2)]
    d = engine(cluster, "decode", events=False)
    proxy = kv_proxy(cluster, ps, d, tokenizer)
    chat = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "system", "content": doc("delta", 3)},
                                                          {"role": "user", "content": "sim 1"}]}
    assert request("POST", ps[1].url + "/v1/chat/completions", chat, timeout=20)[0] == 200
    assert wait_until(lambda: kv_blocks(proxy)[ps[1].addr] == 3, timeout=5), kv_blocks(proxy)
    chat["messages"][1]["content"] = "sim 2"
    status, headers, _ = proxy.post("/v1/chat/completions", chat)
    assert status == 200 and headers["x-pd-prefill"] == ps[1].addr and picks(proxy, "kv_events") == 1


@pytest.mark.procs
def test_a_sequence_gap_is_replayed_or_resyncs_the_view(cluster, tokenizer, tmp_path):
    replaying = engine(cluster, node_dir=tmp_path)
    resyncing = engine(cluster, replay=False, node_dir=tmp_path)
    d = engine(cluster, "decode", events=False)
    proxy = kv_proxy(cluster, [replaying, resyncing], d, tokenizer)
    for p in (replaying, resyncing):
        assert ask(p.url, doc("kv", 2))[0] == 200
    assert wait_until(lambda: kv_blocks(proxy) == {replaying.addr: 2, resyncing.addr: 2}, timeout=5)

    for p in (replaying, resyncing):  # the PUB socket drops the next batches (as over its high-water mark)
        nodestate.set_fault(tmp_path, "kv_events_gap", p.proc.pid, True)
    time.sleep(0.5)  # engines read faults.json at most every 0.2 s
    for p in (replaying, resyncing):
        assert ask(p.url, doc("batch", 3))[0] == 200
    time.sleep(0.3)
    assert kv_blocks(proxy) == {replaying.addr: 2, resyncing.addr: 2}  # nothing arrived
    for p in (replaying, resyncing):
        nodestate.set_fault(tmp_path, "kv_events_gap", p.proc.pid, False)
    time.sleep(0.5)
    for p in (replaying, resyncing):
        assert ask(p.url, doc("stream", 1))[0] == 200  # its batch shows the gap
    # replayed: 2 + 3 + 1 blocks; no replay endpoint: cleared, then only what came after the gap
    assert wait_until(lambda: kv_blocks(proxy) == {replaying.addr: 6, resyncing.addr: 1}, timeout=5), \
        kv_blocks(proxy)


@pytest.mark.procs
def test_a_dead_publisher_falls_back_to_the_approximate_view(cluster, tokenizer):
    ps = [engine(cluster) for _ in range(2)]
    d = engine(cluster, "decode", events=False)
    proxy = kv_proxy(cluster, ps, d, tokenizer)
    beta = doc("beta", 4)
    status, headers, _ = proxy.post("/v1/completions", {"model": MODEL, "prompt": beta + " 1", "max_tokens": 2})
    assert status == 200 and headers["x-pd-prefill"] == ps[0].addr  # new: the emptiest, the first
    assert wait_until(lambda: kv_blocks(proxy)[ps[0].addr] == 4, timeout=5)

    # the engine restarts on the same ports without its publisher: it holds nothing, and says nothing
    victim = ps[0]
    os.kill(victim.proc.pid, signal.SIGKILL)
    victim.proc.wait(5)
    assert wait_until(lambda: victim.addr not in kv_blocks(proxy), timeout=5), kv_blocks(proxy)
    engine(cluster, events=False, ports=(victim.port, victim.kv_port, victim.events, victim.replay))
    assert wait_until(lambda: proxy.admin("GET", f"/instances/prefill/{victim.addr}")[1]["state"] == "healthy",
                      timeout=10)
    # its approximate view (what was routed there) decides for it now
    status, headers, _ = proxy.post("/v1/completions", {"model": MODEL, "prompt": beta + " 2", "max_tokens": 2})
    assert status == 200 and headers["x-pd-prefill"] == victim.addr
    assert picks(proxy, "cache") == 1 and picks(proxy, "kv_events") == 0
    assert victim.addr not in kv_blocks(proxy)


@pytest.mark.parametrize("argv, message", [
    (["--kv-events", "tcp://127.0.0.1:5557"], "names neither {host} nor {port}"),
    (["--kv-events", "127.0.0.1:7100=tcp://*:5557"], "not a wildcard"),
    (["--kv-events", "127.0.0.1:7100=http://127.0.0.1:5557"], "not a tcp:// or ipc:// endpoint"),
    (["--kv-events", "tcp://{host}:5557"], "needs tokenizer"),
    (["--kv-events", "tcp://{host}:5557", "--tokenizer", "TOK", "--policy", "least_conn"], "read by the cache_aware policy only"),
])
@pytest.mark.procs
def test_kv_events_flags_are_checked_before_start(argv, message, tokenizer):
    from pdproxy.cli import config_from_args
    from pdproxy.config import ConfigError

    argv = [tokenizer if a == "TOK" else a for a in argv]
    if "--policy" not in argv:
        argv += ["--prefill-policy", "cache_aware"]
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        config_from_args(["--prefill", "127.0.0.1:7100", "--decode", "127.0.0.1:7200", *argv])


@pytest.mark.procs
def test_a_template_and_an_instance_entry_name_each_instance_its_endpoints(tokenizer):
    from pdproxy.kv_index import ExactView

    view = ExactView(["10.0.0.9:7100=tcp://10.0.0.9:6000|tcp://10.0.0.9:6100,tcp://10.0.0.9:6001",
                      "tcp://{host}:5557|tcp://{host}:5558"], "", None)
    assert [(e.pub, e.replay) for e in view.endpoints("10.0.0.9:7100")] == [
        ("tcp://10.0.0.9:6000", "tcp://10.0.0.9:6100"), ("tcp://10.0.0.9:6001", None)]
    assert [(e.pub, e.replay) for e in view.endpoints("10.0.0.1:7100")] == [
        ("tcp://10.0.0.1:5557", "tcp://10.0.0.1:5558")]


def test_events_of_either_encoding_are_read():
    """vLLM >= PR 42892 sends events as tagged maps, older releases as tagged arrays (docs/kv-events.md)."""
    import msgspec

    from pdproxy.kv_events import decode
    from pdproxy.kv_index import BlockIndex

    stored = {"type": "BlockStored", "block_hashes": [11, 12], "parent_block_hash": None, "token_ids": [1, 2, 3, 4],
              "block_size": 2, "lora_id": None, "medium": "GPU", "lora_name": None, "group_idx": 0,
              "a_field_from_the_future": 1}
    as_maps = msgspec.msgpack.encode([1.0, [stored, {"type": "BlockRemoved", "block_hashes": [12], "medium": "GPU"}],
                                      0])
    as_arrays = msgspec.msgpack.encode([1.0, [["BlockStored", [11, 12], None, [1, 2, 3, 4], 2, None, "GPU"],
                                              ["BlockRemoved", [12], "GPU"]]])
    for payload in (as_maps, as_arrays):
        index = BlockIndex()
        for ev in decode(payload).events:
            (index.stored if type(ev).__name__.endswith("Stored") else index.removed)(ev)
        assert len(index) == 1 and index.match([hash((1, 2)), hash((3, 4))]) == 1
