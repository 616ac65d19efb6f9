"""The simulated engine answers as vLLM 0.32 answered when probed on this machine (docs/real-engine.md, "Simulator and
real engine compared"): error bodies and status codes, the ready lines in the log, /v1/models, /metrics families,
labels, help texts and buckets, and where each prompt token's KV came from."""

import json
import sys
import urllib.error
import urllib.request

import pytest

from tests.simcluster.simtest_helpers import free_port, metric, post, sim_env, wait_http

pytestmark = pytest.mark.procs  # every test here starts an engine process

HOST = "127.0.10.145"
TTFT_BUCKETS = ["0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0",
                "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0", "+Inf"]


@pytest.fixture
def engine(spawn, state_root):
    port = free_port(HOST)
    log = state_root / "engine.log"
    proc = spawn([sys.executable, "-m", "simcluster.engine", "serve", "/models/tiny-llama", "--served-model-name",
                  "tiny", "--host", HOST, "--port", str(port), "--max-model-len", "1024"], sim_env(), log)
    base = f"http://{HOST}:{port}"
    wait_http(base + "/health", proc=proc)
    return {"url": base, "port": port, "log": log}


def send(url, raw: bytes):
    req = urllib.request.Request(url + "/v1/completions", raw, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_bad_requests_get_vllms_status_and_error_body(engine):
    url = engine["url"]

    def ask(**body):
        return send(url, json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 4, **body}).encode())

    long_prompt = " ".join(["token"] * 1500)
    cases = [
        (ask(max_tokens=-1), 400, "BadRequestError", "max_tokens",
         "max_tokens must be at least 1, got -1. (parameter=max_tokens, value=-1)"),
        (ask(max_tokens=0), 400, "BadRequestError", "max_tokens",
         "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"),
        (ask(model="nope"), 404, "NotFoundError", "model", "The model `nope` does not exist. Valid aliases: tiny."),
        (ask(prompt=long_prompt), 400, "BadRequestError", "input_tokens",
         "This model's maximum context length is 1024 tokens. However, your prompt contains at least 1025 input "
         "tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input "
         "prompt. (parameter=input_tokens, value=1025)"),
        (ask(kv_transfer_params="garbage"), 400, "Bad Request", "body.kv_transfer_params",
         "1 validation error:\n  {'type': 'dict_type', 'loc': 'body.kv_transfer_params', "
         "'msg': 'Input should be a valid dictionary', 'input': 'garbage'}"),
        (send(url, b'{"model":'), 400, "Bad Request", "body.9",
         "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.9', 'msg': 'JSON decode error', "
         "'input': '<dict of 0 items>', 'ctx': {'error': 'Expecting value'}}"),
    ]
    for (status, body), want_status, kind, param, message in cases:
        assert status == want_status, body
        assert body == {"error": {"message": message, "type": kind, "param": param, "code": want_status}}
    # vLLM ignores kv_transfer_params on an engine without a KV connector
    status, body = ask(kv_transfer_params={"do_remote_decode": True})
    assert status == 200 and body["kv_transfer_params"] is None
    assert metric(url, "vllm:request_success_total") == 1  # the refused requests never reached the engine core


def test_ready_lines_come_in_vllms_order_once_health_answers(engine):
    lines = engine["log"].read_text().splitlines()

    def at(text):
        return next(i for i, line in enumerate(lines) if text in line)

    assert at(f"Starting vLLM server on http://{HOST}:{engine['port']}") < at("serving tiny (None) on http://") \
        < at("INFO:     Waiting for application startup.") < at("INFO:     Application startup complete.")
    assert lines.count("INFO:     Application startup complete.") == 1


def test_models_card_and_version(engine):
    with urllib.request.urlopen(engine["url"] + "/v1/models", timeout=5) as resp:
        models = json.loads(resp.read())
    (card,) = models["data"]
    assert {k: card[k] for k in ("id", "object", "owned_by", "root", "parent", "max_model_len")} == {
        "id": "tiny", "object": "model", "owned_by": "vllm", "root": "/models/tiny-llama", "parent": None,
        "max_model_len": 1024}
    assert card["created"] > 1_600_000_000
    (perm,) = card["permission"]
    assert perm["id"].startswith("modelperm-") and perm["object"] == "model_permission"
    assert {k: perm[k] for k in ("allow_sampling", "allow_logprobs", "allow_view", "organization", "group")} == {
        "allow_sampling": True, "allow_logprobs": True, "allow_view": True, "organization": "*", "group": None}
    with urllib.request.urlopen(engine["url"] + "/version", timeout=5) as resp:
        assert set(json.loads(resp.read())) == {"version"}


def test_metrics_exist_at_zero_with_vllms_labels_and_buckets(engine):
    text = urllib.request.urlopen(engine["url"] + "/metrics", timeout=5).read().decode()
    labels = 'engine="0",model_name="tiny"'
    for family in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                   "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total",
                   "vllm:prefix_cache_hits_total", "vllm:external_prefix_cache_queries_total",
                   "vllm:external_prefix_cache_hits_total", "vllm:num_preemptions_total",
                   "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
                   "vllm:e2e_request_latency_seconds_count"):
        assert f"{family}{{{labels}}} 0.0" in text, family
    for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
        assert f'vllm:prompt_tokens_by_source_total{{{labels},source="{source}"}} 0.0' in text
    for reason in ("stop", "length", "abort", "error", "repetition"):
        assert f'vllm:request_success_total{{engine="0",finished_reason="{reason}",model_name="tiny"}} 0.0' in text
    buckets = [line.split('le="')[1].split('"')[0] for line in text.splitlines()
               if line.startswith("vllm:time_to_first_token_seconds_bucket")]
    assert buckets == TTFT_BUCKETS
    assert "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds." in text
    assert "# HELP vllm:num_requests_running Number of requests in model execution batches." in text
    assert "# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source." in text


def test_prompt_tokens_count_the_whole_prompt_split_by_source(engine):
    url = engine["url"]
    prompt = " ".join(f"w{i}" for i in range(300))  # 2 full blocks of 128 + a tail
    for _ in range(2):
        post(url + "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 2})
    assert metric(url, "vllm:prompt_tokens_total") == 600
    # the second time the engine's prefix cache held the 2 full blocks
    assert metric(url, "vllm:prompt_tokens_by_source_total", source="local_cache_hit") == 256
    assert metric(url, "vllm:prompt_tokens_by_source_total", source="local_compute") == 344
    assert metric(url, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 0
