"""The layerwise PD flow (--pd-flow layerwise, MooncakeLayerwiseConnector) end to end: real simulated engines and the
real proxy on 127.0.0.1. The request goes to a Decode first, the Decode calls the proxy's /v1/metaserver, the proxy
sends the Prefill leg, the Prefill pushes the KV into the Decode, the Decode answers."""

import json
import os
import signal
import socket
import subprocess
import time

import pytest

from simcluster import nodestate
from tests.pdproxy.proxy_procs import PY, ROOT, request, sse_events, wait_until
from tests.ports import free_port

pytestmark = pytest.mark.procs  # every test here starts processes or servers

LAYERWISE = "MooncakeLayerwiseConnector"


class Engine:
    def __init__(self, proc, port, log, node_dir):
        self.proc, self.port, self.log, self.node_dir = proc, port, log, node_dir
        self.addr = f"127.0.0.1:{port}"
        self.url = f"http://{self.addr}"

    def metric(self, name: str, **labels) -> float:
        total = 0.0
        for line in request("GET", self.url + "/metrics")[2].decode().splitlines():
            if (line.startswith(name + "{") or line.startswith(name + " ")) and all(
                    f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def logged(self) -> str:
        return self.log.read_text()

    def kill(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)


def engine(cluster, tmp_path, role: str, **env) -> Engine:
    """A simcluster engine (TP 1) with the layerwise connector, its log in tmp_path, its node dir for faults."""
    port, kv_port = free_port(), free_port()
    kv = {"kv_connector": LAYERWISE, "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
          "kv_port": str(kv_port), "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 1},
                                                                  "decode": {"dp_size": 1, "tp_size": 1}}}
    node_dir = tmp_path / f"{role}-{port}"
    node_dir.mkdir()
    log = tmp_path / f"{role}-{port}.log"
    proc = subprocess.Popen(
        [PY, "-m", "simcluster.engine", "serve", "sim-model", "--host", "127.0.0.1", "--port", str(port), "-tp", "1",
         "--served-model-name", "sim-model", "--kv-transfer-config", json.dumps(kv)],
        stdout=subprocess.DEVNULL, stderr=open(log, "wb"), cwd=ROOT, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "ASCEND_RT_VISIBLE_DEVICES": "0", "SIMCLUSTER_TIME_SCALE": "0.05",
             "SIMCLUSTER_STARTUP_S": "0.1", "SIMCLUSTER_NODE_DIR": str(node_dir), **env})
    cluster.procs.append(proc)
    eng = Engine(proc, port, log, node_dir)
    assert wait_until(lambda: _healthy(eng.url), timeout=15), eng.logged()
    return eng


def _healthy(url: str) -> bool:
    try:
        return request("GET", url + "/health", timeout=1)[0] == 200
    except OSError:
        return False


def layerwise_proxy(cluster, prefill, decode, *args):
    return cluster.proxy(prefill, decode, "--pd-flow", "layerwise", *args)


def chat(content="tell me about layer by layer KV pushes", stream=False, **kw):
    return {"model": "sim-model", "messages": [{"role": "user", "content": content}], "stream": stream,
            "max_tokens": 6, **kw}


def completion(prompt="tell me about layer by layer KV pushes", stream=False, **kw):
    return {"model": "sim-model", "prompt": prompt, "stream": stream, "max_tokens": 6, **kw}


def test_two_workers_route_each_metaserver_call_to_the_worker_holding_its_request(cluster, tmp_path):
    p, d = engine(cluster, tmp_path, "prefill"), engine(cluster, tmp_path, "decode")
    proxy = layerwise_proxy(cluster, [p], [d], "--workers", "2")
    for i in range(16):  # each on a new connection: the client's and the Decode's land on either worker
        status, _, raw = proxy.post("/v1/completions", completion(stream=i % 2 == 1), {"X-Request-Id": f"w-{i}"})
        assert status == 200, raw
    here = proxy.metric("pdproxy_metaserver_calls_total", found="this_worker")
    there = proxy.metric("pdproxy_metaserver_calls_total", found="other_worker")
    assert here + there == 16 and there > 0 and proxy.metric("pdproxy_metaserver_calls_total", found="none") == 0
    assert p.metric("simcluster:kv_transfers_total", direction="send", outcome="ok", peer=d.addr) == 16


def test_completions_and_chats_stream_and_whole_through_the_layerwise_flow(cluster, tmp_path):
    p, d = engine(cluster, tmp_path, "prefill"), engine(cluster, tmp_path, "decode")
    proxy = layerwise_proxy(cluster, [p], [d])
    cases = [("/v1/completions", completion(), "cmpl-{}-0"),
             ("/v1/completions", completion(stream=True, stream_options={"include_usage": True}), "cmpl-{}-0"),
             ("/v1/chat/completions", chat(), "chatcmpl-{}"),
             ("/v1/chat/completions", chat(stream=True), "chatcmpl-{}")]
    prompt_tokens = 0
    for i, (path, body, vllm_id) in enumerate(cases):
        rid = f"lw-{i}"
        status, headers, raw = proxy.post(path, body, {"X-Request-Id": rid})
        assert status == 200, raw
        assert (headers["x-pd-prefill"], headers["x-pd-decode"], headers["x-pd-retries"]) == (p.addr, d.addr, "0")
        if body["stream"]:
            events = sse_events(raw)
            assert events[-1] == "[DONE]"
            text = "".join(c.get("text") or (c.get("delta") or {}).get("content") or ""
                           for e in events[:-1] for c in e["choices"])
            if "stream_options" in body:
                prompt_tokens += events[-2]["usage"]["prompt_tokens"]
        else:
            answer = json.loads(raw)
            choice = answer["choices"][0]
            text = choice.get("text") or choice["message"]["content"]
            prompt_tokens += answer["usage"]["prompt_tokens"]
        assert text.startswith("[simulated]") and len(text.split()) == 6
        # the Decode called the metaserver with its own request id, then the Prefill pushed to it under that id
        assert (f"Send request: {vllm_id.format(rid)} to proxy metaserver: "
                f"http://127.0.0.1:{proxy.port}/v1/metaserver") in d.logged()
        assert f"for request {vllm_id.format(rid)} to 127.0.0.1:" in p.logged()
    # the Prefill prefilled (one token each), the Decode computed no prompt token: all of its KV was pushed
    assert p.metric("vllm:generation_tokens_total") == 4
    assert p.metric("vllm:prompt_tokens_total") >= prompt_tokens > 0
    assert d.metric("vllm:prompt_tokens_total") == p.metric("vllm:prompt_tokens_total")  # vLLM counts every one
    assert d.metric("vllm:prompt_tokens_by_source_total", source="local_compute") == 0
    assert d.metric("vllm:external_prefix_cache_hits_total") == p.metric("vllm:prompt_tokens_total")
    assert p.metric("simcluster:kv_transfers_total", direction="send", outcome="ok", peer=d.addr) == 4
    assert d.metric("simcluster:kv_transfers_total", direction="recv", outcome="ok", peer=p.addr) == 4
    assert d.metric("simcluster:kv_transfer_bytes_total", direction="recv") == p.metric(
        "simcluster:kv_transfer_bytes_total", direction="send") > 0
    assert p.metric("simcluster:kv_held_requests") == 0  # pushed, nothing kept for a pull
    assert proxy.metric("pdproxy_edge_requests_total", prefill=p.addr, decode=d.addr) == 4
    assert proxy.metric("pdproxy_prefill_duration_seconds_count") == 4
    assert proxy.metric("pdproxy_time_to_first_token_seconds_count") == 4
    assert proxy.metric("pdproxy_requests_total", code="200") == 4


def test_the_decode_is_asked_first_and_the_prefill_gets_its_params(cluster, tmp_path):
    """What each engine was sent, read off their metrics and logs: the Decode got the client's max_tokens, the
    Prefill one token; a Prefill given the pull flow's params (no Decode named) refuses them, as the real one dies."""
    p, d = engine(cluster, tmp_path, "prefill"), engine(cluster, tmp_path, "decode")
    proxy = layerwise_proxy(cluster, [p], [d])
    status, _, raw = proxy.post("/v1/completions", completion(max_tokens=9))
    assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] == 9
    assert d.metric("vllm:generation_tokens_total") == 9 and p.metric("vllm:generation_tokens_total") == 1
    status, _, raw = request("POST", p.url + "/v1/completions", completion(
        max_tokens=1, kv_transfer_params={"do_remote_decode": True, "do_remote_prefill": False}))
    assert status == 500 and "remote_cached_tokens" in json.loads(raw)["error"]["message"]


def test_no_healthy_prefill_or_decode_is_a_503_before_anything_is_sent(cluster, tmp_path):
    p, d = engine(cluster, tmp_path, "prefill"), engine(cluster, tmp_path, "decode")
    nobody = f"127.0.0.1:{free_port()}"
    proxy = layerwise_proxy(cluster, [nobody], [d])
    status, _, raw = proxy.post("/v1/completions", completion())
    assert status == 503 and "no healthy prefill instance" in json.loads(raw)["error"]["message"]
    assert proxy.metric("pdproxy_backend_requests_total", role="decode") == 0
    assert "Send request" not in d.logged()
    proxy = layerwise_proxy(cluster, [p], [nobody])
    status, _, raw = proxy.post("/v1/chat/completions", chat())
    assert status == 503 and "no healthy decode instance" in json.loads(raw)["error"]["message"]
    assert proxy.metric("pdproxy_backend_requests_total", role="prefill") == 0


def test_a_dead_prefill_or_decode_is_retried_on_another(cluster, tmp_path):
    ps = [engine(cluster, tmp_path, "prefill") for _ in range(2)]
    ds = [engine(cluster, tmp_path, "decode") for _ in range(2)]
    # health checks far apart: the proxy still takes the killed ones for healthy and meets them on the way
    proxy = layerwise_proxy(cluster, ps, ds, "--policy", "round_robin", "--health-interval", "60")
    time.sleep(1)  # past the health round the proxy runs as it starts
    ps[0].kill()
    ds[0].kill()
    served = []
    for i in range(4):
        status, headers, raw = proxy.post("/v1/completions", completion(stream=i % 2 == 1))
        assert status == 200, raw
        served.append((headers["x-pd-prefill"], headers["x-pd-decode"], int(headers["x-pd-retries"])))
    assert {(pa, da) for pa, da, _ in served} == {(ps[1].addr, ds[1].addr)}
    retried = {role: proxy.metric("pdproxy_retries_total", role=role) for role in ("prefill", "decode")}
    assert retried["prefill"] >= 1 and retried["decode"] >= 1, (retried, served)
    assert sum(r for _, _, r in served) == retried["prefill"] + retried["decode"]
    assert proxy.metric("pdproxy_backend_requests_total", role="prefill", backend=ps[0].addr, outcome="connect") >= 1
    assert proxy.metric("pdproxy_edge_requests_total", prefill=ps[1].addr, decode=ds[1].addr) == 4


def test_no_prefill_left_is_a_502_and_ends_the_waiting_decode(cluster, tmp_path):
    p = engine(cluster, tmp_path, "prefill")
    d = engine(cluster, tmp_path, "decode", SIMCLUSTER_KV_PUSH_TIMEOUT_S="60")
    proxy = layerwise_proxy(cluster, [p], [d], "--health-interval", "60")
    time.sleep(1)
    p.kill()
    t0 = time.monotonic()
    status, headers, raw = proxy.post("/v1/chat/completions", chat(stream=True))
    error = json.loads(raw)["error"]
    assert status == 502 and error["type"] == "BadGatewayError", raw
    assert f"no prefill instance could serve the request; last error: prefill {p.addr}" in error["message"]
    assert time.monotonic() - t0 < 10  # not the Decode's 60 s wait for a push
    assert headers.get("x-pd-decode") is None
    # the proxy closed the Decode's leg: the waiting Decode aborted it
    assert wait_until(lambda: d.metric("vllm:request_success_total", finished_reason="abort") == 1)
    assert proxy.metric("pdproxy_errors_total", cause="prefill_connect") == 1


def test_a_client_that_goes_away_cancels_both_legs(cluster, tmp_path):
    p, d = engine(cluster, tmp_path, "prefill"), engine(cluster, tmp_path, "decode")
    nodestate.set_fault(p.node_dir, "hang", p.proc.pid, True)  # the Prefill takes the request and never computes
    proxy = layerwise_proxy(cluster, [p], [d])

    def inflight():
        _, listing = proxy.admin("GET", "/instances")
        return {role: sum(i["inflight"] for i in listing[role]) for role in ("prefill", "decode")}

    client = socket.create_connection(("127.0.0.1", proxy.port))
    body = json.dumps(completion()).encode()
    client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
    assert wait_until(lambda: inflight() == {"prefill": 1, "decode": 1}), inflight()
    client.close()
    assert wait_until(lambda: inflight() == {"prefill": 0, "decode": 0}), inflight()
    assert wait_until(lambda: d.metric("vllm:request_success_total", finished_reason="abort") == 1)


def test_metaserver_calls_for_unknown_requests_are_404(cluster, tmp_path):
    """A call without a token, or with one no request waits for, is a 404 that echoes nothing of it."""
    d = engine(cluster, tmp_path, "decode")
    proxy = layerwise_proxy(cluster, [d], [d])
    status, headers, raw = proxy.post("/v1/metaserver", {"request_id": "cmpl-nobody-0", "do_remote_decode": True})
    assert status == 404 and headers["content-type"] == "application/json"
    assert json.loads(raw)["error"] == {"message": "a metaserver call must use the URL its request was given (the "
                                                   "Decode leg's kv_transfer_params metaserver, /v1/metaserver/<token>)",
                                        "type": "NotFoundError", "param": None, "code": 404}
    status, _, raw = proxy.post("/v1/metaserver/Zm9yZ2VkLXRva2VuLWd1ZXNzZWQtaGVyZQ", {"request_id": "cmpl-nobody-0"})
    assert status == 404 and json.loads(raw)["error"]["message"] == (
        "unknown metaserver URL: no request of this proxy waits for a call there (a call must use the URL its request "
        "was given; the request may have ended)")
    assert proxy.metric("pdproxy_errors_total", cause="metaserver_unknown") == 2
    assert proxy.metric("pdproxy_metaserver_calls_total", found="none") == 2
    pull = cluster.proxy([d], [d])
    status, _, raw = pull.post("/v1/metaserver", {"request_id": "cmpl-nobody-0"})
    assert status == 404 and "--pd-flow pull" in json.loads(raw)["error"]["message"]


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_layerwise_refuses_a_wildcard_host_without_an_advertised_one(host, monkeypatch):
    from pdproxy.cli import config_from_args
    from pdproxy.config import ConfigError

    argv = [PY, "-m", "pdproxy", "--host", host, "--port", "0", "--pd-flow", "layerwise"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PDPROXY_ALLOW_WILDCARD": "1"}
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "give --advertise-host" in done.stderr
    monkeypatch.setenv("PDPROXY_ALLOW_WILDCARD", "1")
    cfg = config_from_args(["--host", host, "--pd-flow", "layerwise", "--advertise-host", "127.0.0.1"])
    assert (cfg.pd_flow, cfg.advertise_host, cfg.workers) == ("layerwise", "127.0.0.1", 1)
    assert config_from_args(["--pd-flow", "layerwise", "--workers", "2"]).workers == 2
    with pytest.raises(ConfigError, match="wildcard"):
        config_from_args(["--pd-flow", "layerwise", "--advertise-host", "0.0.0.0"])


def test_the_flag_defaults_to_pull():
    from pdproxy.cli import config_from_args

    assert config_from_args([]).pd_flow == "pull"
    argv = [PY, "-m", "pdproxy", "--pd-flow", "push"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "invalid choice: 'push'" in done.stderr

