"""A real Prefill and a real Decode (vLLM for CPUs, NixlConnector) behind pdproxy: requests go client -> pdproxy ->
real Prefill -> KV over NIXL -> real Decode, stream and not, chat and completion; the Decode's own metrics show it
loaded the KV instead of computing the prompt, and our telemetry reads both engines' pages (docs/real-engine.md).
The model is tiny and random: the answers are gibberish, the protocols are vLLM's."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.pdproxy.proxy_procs import kv_blocks, request, sse_events
from tests.realengine.real_engines import (
    DOCUMENT,
    MODEL_DIR,
    PROMPT,
    SERVED,
    require_install,
    sample,
    start_engine,
    start_proxy,
    stop,
    wait_ready,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.procs, pytest.mark.real_engine]


@pytest.fixture(scope="module")
def real_pd(tmp_path_factory):
    require_install()
    logs = tmp_path_factory.mktemp("real-engines")
    prefill = start_engine("prefill", "127.0.20.1", logs / "prefill.log", kv_events=True)
    decode = start_engine("decode", "127.0.20.2", logs / "decode.log")
    proxy = None
    try:
        wait_ready(prefill, decode)
        proxy = start_proxy(prefill, decode)
        yield prefill, decode, proxy
    finally:
        for proc in (proxy.proc if proxy else None, prefill.proc, decode.proc):
            if proc is not None:
                stop(proc)


def handed_over(decode) -> tuple[float, float]:
    page = decode.metrics()
    return (sample(page, "vllm:nixl_xfer_time_seconds_count"),
            sample(page, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer"))


def test_a_completion_goes_through_both_real_engines_and_the_decode_loads_the_kv(real_pd):
    prefill, decode, proxy = real_pd
    transfers, external = handed_over(decode)
    status, headers, raw = request("POST", proxy.url + "/v1/completions",
                                   {"model": SERVED, "prompt": PROMPT, "max_tokens": 8, "temperature": 0},
                                   timeout=120)
    assert status == 200, raw[:500]
    answer = json.loads(raw)
    assert answer["choices"][0]["finish_reason"] in ("length", "stop") and answer["usage"]["completion_tokens"] >= 1
    assert headers["x-pd-prefill"] == prefill.addr and headers["x-pd-decode"] == decode.addr
    transfers_after, external_after = handed_over(decode)
    assert transfers_after == transfers + 1, "the Decode did not pull KV over NIXL"
    assert external_after > external, "the Decode computed the prompt instead of loading it"
    prefill_page = prefill.metrics()
    assert sample(prefill_page, "vllm:prompt_tokens_by_source_total", source="local_compute") > 0


def test_a_streamed_chat_goes_through_both_real_engines(real_pd):
    prefill, decode, proxy = real_pd
    transfers, _ = handed_over(decode)
    status, _, raw = request("POST", proxy.url + "/v1/chat/completions",
                             {"model": SERVED, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8,
                              "stream": True, "stream_options": {"include_usage": True}}, timeout=120)
    assert status == 200, raw[:500]
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e.get("choices")]
    assert chunks and all(e["object"] == "chat.completion.chunk" for e in chunks)
    assert any(e["choices"][0].get("finish_reason") for e in chunks)
    assert events[-2]["usage"]["completion_tokens"] >= 1
    assert handed_over(decode)[0] == transfers + 1


def test_vllms_own_errors_reach_the_client_in_vllms_shape(real_pd):
    _, _, proxy = real_pd
    status, _, raw = request("POST", proxy.url + "/v1/completions",
                             {"model": "no-such-model", "prompt": PROMPT, "max_tokens": 4}, timeout=60)
    error = json.loads(raw)["error"]
    assert status == 404 and error["type"] == "NotFoundError" and "no-such-model" in error["message"], raw
    status, _, raw = request("POST", proxy.url + "/v1/completions",
                             {"model": SERVED, "prompt": PROMPT, "max_tokens": -1}, timeout=60)
    error = json.loads(raw)["error"]
    assert status == 400 and error["type"] == "BadRequestError" and "max_tokens" in error["message"], raw


def test_our_telemetry_reads_the_real_engines_pages(real_pd):
    from apps.telemetry.scrape import OK, read_target

    prefill, decode, _ = real_pd
    values = {}
    for engine in (prefill, decode):
        readings = []

        def read_ok(engine=engine, readings=readings):  # a loaded machine can keep /metrics past our 2 s once
            readings.append(read_target(engine.role, engine.role, engine.url + "/metrics"))
            return readings[-1].status == OK

        try:
            wait_until(read_ok, timeout=30, what=f"our telemetry to read the real {engine.role}'s page", step=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {[r.reason for r in readings]}") from None
        v = values[engine.role] = readings[-1].values
        assert v["prompt_tokens"] > 0 and v["ttft_count"] >= 1 and v["running"] == 0, v
        assert v["ttft_buckets"], "vLLM's TTFT histogram buckets were not read"
    decoded = values["decode"]
    assert decoded["generation_tokens"] > 0 and decoded["external_hits"] > 0, decoded


def test_the_engines_start_within_the_budget(real_pd):
    """The figures docs/real-engine.md gives (printed with -s): start-up seconds and resident memory."""
    prefill, decode, _ = real_pd
    for engine in (prefill, decode):
        print(f"{engine.role}: ready after {engine.ready_after:.0f} s, {engine.rss_mb():.0f} MB resident, "
              f"{len(engine.spinners)} idle spinning thread(s) reniced")
        assert engine.rss_mb() < 6000


def test_each_engine_runs_its_model_in_the_enginecore_without_a_worker(real_pd):
    """The profile's "uni" executor stands (VLLM_ENABLE_V1_MULTIPROCESSING=0): vLLM's CPU platform would otherwise
    feed a separate Worker over its shared-memory queue, whose lost wake-ups made a Decode take up to 32 s."""
    for engine in real_pd[:2]:
        out = subprocess.run(["ps", "-o", "comm=", "--sid", str(engine.proc.pid)], capture_output=True, text=True)
        names = out.stdout.split()
        assert "VLLM::EngineCor" in names and "VLLM::Worker" not in names, (engine.role, names)


def test_cache_aware_subscribes_to_the_real_prefills_kv_events(real_pd):
    """The Prefill publishes on tcp://*:0 (VLLM_HOST_IP, a port it picks); a cache_aware proxy with `--kv-events
    discover` finds it at GET /kv_event_sources, indexes the blocks the engine stores, and routes by them: the
    engine's block hashes are its own, the proxy matches them by the tokens it cuts with the model's tokenizer."""
    prefill, decode, _ = real_pd
    sources = json.loads(request("GET", prefill.url + "/kv_event_sources")[2])
    assert list(sources) == ["0"]
    endpoint = sources["0"]["endpoint"]
    assert endpoint.startswith("tcp://127.0.20.1:") and not endpoint.endswith(":0"), sources
    assert sources["0"]["replay_endpoint"].startswith("tcp://127.0.20.1:")
    # the simulator answers alike (tests/simcluster/test_engine_kv_events.py)
    assert set(sources["0"]) == {"enable_kv_cache_events", "publisher", "endpoint", "replay_endpoint",
                                 "buffer_steps", "hwm", "max_queue_size", "topic"}
    proxy = start_proxy(prefill, decode, "--prefill-policy", "cache_aware", "--decode-policy", "least_conn",
                        "--kv-events", "discover", "--tokenizer", str(MODEL_DIR))
    try:
        def metrics() -> str:
            return request("GET", proxy.url + "/metrics")[2].decode()

        def blocks() -> float | None:
            return kv_blocks(metrics()).get(prefill.addr)

        wait_until(lambda: blocks() is not None, timeout=60, what="the proxy to subscribe to the real Prefill")
        before = blocks()
        body = {"model": SERVED, "prompt": DOCUMENT, "max_tokens": 2, "temperature": 0}
        status, headers, raw = request("POST", proxy.url + "/v1/completions", body, timeout=120)
        assert status == 200 and headers["x-pd-prefill"] == prefill.addr, raw[:500]
        wait_until(lambda: blocks() >= before + 2, timeout=30, what="the Prefill's BlockStored events")
        status, _, raw = request("POST", proxy.url + "/v1/completions", {**body, "prompt": DOCUMENT + " again"},
                                 timeout=120)
        assert status == 200, raw[:500]
        assert sample(metrics(), "pdproxy_cache_aware_picks_total", reason="kv_events") == 1, \
            "the second request was not routed by the Prefill's KV events"
    finally:
        stop(proxy.proc)
