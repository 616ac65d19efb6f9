"""The PD protocol across real processes: P holds KV, D pulls and verifies it, faults behave."""

import json
import sys
import time
import urllib.error
import urllib.request

import pytest

from simcluster import nodestate, profiles
from tests.simcluster.simtest_helpers import free_port, sim_env, wait_http

pytestmark = pytest.mark.procs  # every test here starts processes or servers

P_HOST, D_HOST = "127.0.10.110", "127.0.10.111"
EXTRA = {"prefill": {"dp_size": 1, "tp_size": 2}, "decode": {"dp_size": 1, "tp_size": 1}}
PROMPT = " ".join(f"w{i}" for i in range(300))  # 300 tokens = 2 full blocks + a tail


def post(url, body, timeout=20):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def metric(url, name, **labels):
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
    return total


def start_engine(spawn, tmp, role, host, port, kv_port, node_dir=None, **env):
    kv = {"kv_connector": "MooncakeConnectorV1", "kv_role": role, "kv_port": str(kv_port),
          "kv_connector_extra_config": EXTRA}
    tp = "2" if role == "kv_producer" else "1"
    extra_env = {"ASCEND_RT_VISIBLE_DEVICES": "0,1" if tp == "2" else "0", **env}
    if node_dir:
        extra_env["SIMCLUSTER_NODE_DIR"] = node_dir
    proc = spawn([sys.executable, "-m", "simcluster.engine", "serve", "/models/ds_r1", "--host", host, "--port",
                  str(port), "--tensor-parallel-size", tp, "--served-model-name", "ds_r1", "--max-num-seqs", "8",
                  "--enforce-eager", "--trust-remote-code", "--seed", "1024", "--kv-transfer-config", json.dumps(kv)],
                 sim_env(**extra_env), tmp / f"{role}-{port}.log")
    base = f"http://{host}:{port}"
    wait_http(base + "/health", proc=proc)
    return proc, base


@pytest.fixture
def pd(spawn, state_root):
    for name in ("p", "d"):
        (state_root / name / "engines").mkdir(parents=True)
        nodestate.write_json(state_root / name / "node.json", {"name": name, "hardware": "A3"})
    p_proc, p = start_engine(spawn, state_root, "kv_producer", P_HOST, free_port(P_HOST), free_port(P_HOST),
                             node_dir=state_root / "p", VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT="0.5")
    _d_proc, d = start_engine(spawn, state_root, "kv_consumer", D_HOST, free_port(D_HOST), free_port(D_HOST),
                              node_dir=state_root / "d")
    return {"p": p, "d": d, "p_pid": p_proc.pid, "p_dir": state_root / "p",
            "d_log": state_root / f"kv_consumer-{d.rsplit(':', 1)[1]}.log"}


def prefill(p, prompt=PROMPT):
    body = {"model": "ds_r1", "prompt": prompt, "max_tokens": 1, "stream": False,
            "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                                   "remote_block_ids": None, "remote_host": None, "remote_port": None}}
    return post(p + "/v1/completions", body)


def test_kv_bytes_arrive_intact_and_are_freed(pd):
    first = prefill(pd["p"])
    params = first["kv_transfer_params"]
    assert first["choices"][0]["finish_reason"] == "length"
    assert params["do_remote_prefill"] is True and params["remote_host"] == P_HOST
    assert params["num_prompt_blocks"] == 3 and len(params["remote_block_ids"]) == 3
    assert metric(pd["p"], "simcluster:kv_held_requests") == 1
    out = post(pd["d"] + "/v1/completions", {"model": "ds_r1", "prompt": PROMPT, "max_tokens": 8,
                                             "kv_transfer_params": params})
    assert out["usage"] == {"prompt_tokens": 300, "completion_tokens": 8, "total_tokens": 308}
    assert out["choices"][0]["text"].startswith("[simulated]")
    expected = profiles.held_bytes(profiles.profile_for("ds_r1"), 300)
    assert metric(pd["p"], "simcluster:kv_transfer_bytes_total", direction="send") == expected
    assert metric(pd["d"], "simcluster:kv_transfer_bytes_total", direction="recv") == expected
    assert metric(pd["d"], "simcluster:kv_transfers_total", outcome="ok") == 1
    assert metric(pd["p"], "simcluster:kv_freed_total", reason="pulled") == 1
    assert metric(pd["p"], "simcluster:kv_held_requests") == 0
    assert metric(pd["d"], "vllm:generation_tokens_total", model_name="ds_r1", engine="0") == 8


def test_a_decode_counts_pulled_prompt_tokens_as_external_kv_transfer(pd):
    """As a real NixlConnector Decode does (docs/real-engine.md): the whole prompt in prompt_tokens_total, all of
    it from external_kv_transfer, none computed; the Prefill computed it."""
    params = prefill(pd["p"])["kv_transfer_params"]
    post(pd["d"] + "/v1/completions", {"model": "ds_r1", "prompt": PROMPT, "max_tokens": 4,
                                       "kv_transfer_params": params})
    by_source = "vllm:prompt_tokens_by_source_total"
    assert metric(pd["d"], "vllm:prompt_tokens_total") == 300
    assert metric(pd["d"], by_source, source="external_kv_transfer") == 300
    assert metric(pd["d"], by_source, source="local_compute") == 0
    assert metric(pd["d"], by_source, source="local_cache_hit") == 0
    assert metric(pd["p"], "vllm:prompt_tokens_total") == metric(pd["p"], by_source, source="local_compute") == 300
    assert metric(pd["p"], by_source, source="external_kv_transfer") == 0


def test_corrupted_transfer_is_caught(pd):
    nodestate.set_fault(pd["p_dir"], "corrupt_kv", pd["p_pid"], True)
    time.sleep(0.3)  # engines re-read faults.json every 0.2 s
    params = prefill(pd["p"])["kv_transfer_params"]
    with pytest.raises(urllib.error.HTTPError) as err:
        post(pd["d"] + "/v1/completions", {"model": "ds_r1", "prompt": PROMPT, "max_tokens": 4,
                                           "kv_transfer_params": params})
    assert err.value.code == 500  # vLLM's bare answer to a failed KV load; the reason is in the log
    assert json.loads(err.value.read()) == {"error": {"message": "Internal server error",
                                                      "type": "InternalServerError", "param": None, "code": 500}}
    logged = pd["d_log"].read_text()
    assert "Failing 1 request(s) due to KV load failure (failure_policy=fail, 300 tokens affected)" in logged
    assert "failed verification" in logged
    assert metric(pd["d"], "simcluster:kv_transfers_total", outcome="checksum_error") == 1


def test_unpulled_kv_is_freed_after_the_abort_timeout(pd):
    params = prefill(pd["p"])["kv_transfer_params"]
    deadline = time.monotonic() + 5
    while metric(pd["p"], "simcluster:kv_freed_total", reason="timeout") < 1:
        assert time.monotonic() < deadline, "held KV was never freed"
        time.sleep(0.2)
    with pytest.raises(urllib.error.HTTPError):
        post(pd["d"] + "/v1/completions", {"model": "ds_r1", "prompt": PROMPT, "max_tokens": 4,
                                           "kv_transfer_params": params})


def test_sse_stream_ends_with_usage_and_done(pd):
    body = {"model": "ds_r1", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 5,
            "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(pd["d"] + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    lines = [x for x in urllib.request.urlopen(req, timeout=20).read().decode().split("\n\n") if x]
    assert lines[-1] == "data: [DONE]"
    usage = json.loads(lines[-2][6:])["usage"]
    assert usage["completion_tokens"] == 5
    chunks = [json.loads(x[6:]) for x in lines[:-2]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_hung_engine_answers_health_but_stalls_requests(pd):
    nodestate.set_fault(pd["p_dir"], "hang", pd["p_pid"], True)
    time.sleep(0.3)
    assert urllib.request.urlopen(pd["p"] + "/health", timeout=2).status == 200
    with pytest.raises(TimeoutError):
        prefill_short = {"model": "ds_r1", "prompt": "x", "max_tokens": 1}
        post(pd["p"] + "/v1/completions", prefill_short, timeout=1.0)
    nodestate.set_fault(pd["p_dir"], "hang", pd["p_pid"], False)
    assert prefill(pd["p"])["choices"][0]["finish_reason"] == "length"


def wait_for_usage(url, wanted, what: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not wanted(metric(url, "vllm:kv_cache_usage_perc", engine="0")):
        assert time.monotonic() < deadline, f"vllm:kv_cache_usage_perc never {what} within {within:g} s"
        time.sleep(0.1)


def test_an_idle_prefills_kv_usage_follows_the_kv_it_holds_and_frees(spawn, state_root):
    """Held KV counts against the cache: the usage gauge rises while a Decode has not pulled it and falls to 0 once
    it has, although the Prefill runs no request meanwhile (an idle core published nothing, so the gauge kept the
    value of its last step: 0 while KV was held, or a stale share after it was freed)."""
    p_proc, p = start_engine(spawn, state_root, "kv_producer", P_HOST, free_port(P_HOST), free_port(P_HOST))
    _d_proc, d = start_engine(spawn, state_root, "kv_consumer", D_HOST, free_port(D_HOST), free_port(D_HOST))
    params = prefill(p)["kv_transfer_params"]
    wait_for_usage(p, lambda usage: usage > 0, "rose above 0 while the KV was held")
    post(d + "/v1/completions", {"model": "ds_r1", "prompt": PROMPT, "max_tokens": 2, "kv_transfer_params": params})
    assert metric(p, "simcluster:kv_freed_total", reason="pulled") == 1
    wait_for_usage(p, lambda usage: usage == 0, "fell back to 0 once the KV was pulled")
