"""MooncakeLayerwiseConnector across real engine processes: the Decode calls the metaserver with the connector's
fields, the Prefill pushes into the Decode's side channel, and a push that never comes, a metaserver nobody serves
or corrupt bytes end the Decode's request with an error. The metaserver here is the test's own: it records the
Decode's call and, in relay mode, sends the Prefill leg the way pdproxy's layerwise flow does."""

import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from simcluster import nodestate, profiles
from tests.simcluster.simtest_helpers import free_port, metric, sim_env, wait_http

pytestmark = pytest.mark.procs  # every test here starts processes or servers

P_HOST, D_HOST, META_HOST = "127.0.10.112", "127.0.10.113", "127.0.10.114"
EXTRA = {"prefill": {"dp_size": 1, "tp_size": 2}, "decode": {"dp_size": 1, "tp_size": 1}}
PROMPT = " ".join(f"w{i}" for i in range(300))  # 2 full blocks + a tail
CONNECTOR_FIELDS = {"token_ids", "request_id", "do_remote_prefill", "do_remote_decode", "remote_block_ids",
                    "remote_block_size", "remote_engine_id", "remote_host", "remote_port", "remote_tp_size",
                    "remote_pcp_size", "remote_dcp_size", "remote_cached_tokens"}


class Metaserver:
    """POST /v1/metaserver: records each call; with `prefill` set, sends the client's request with the Decode's
    params to that Prefill (max_tokens 1, same X-Request-Id) and answers once it has, as pdproxy does."""

    def __init__(self):
        self.calls: list[dict] = []
        self.requests: dict[str, dict] = {}  # X-Request-Id -> the client's body
        self.prefill: str | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                params = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.calls.append(params)
                if server.prefill is not None:
                    rid = params["request_id"].removeprefix("cmpl-").removesuffix("-0")
                    body = {**server.requests[rid], "max_tokens": 1, "stream": False, "kv_transfer_params": params}
                    call(server.prefill + "/v1/completions", body, {"X-Request-Id": rid})
                self.send_response(200)
                self.send_header("Content-Length", "16")
                self.end_headers()
                self.wfile.write(b'{"status": "ok"}')

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer((META_HOST, 0), Handler)
        self.url = f"http://{META_HOST}:{self.httpd.server_address[1]}/v1/metaserver"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def call(url, body, headers=None, timeout=20):
    """(status, parsed body) of a POST, error statuses included."""
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json",
                                                                  **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def start(spawn, tmp, role, host, node_dir, **env):
    port, kv_port = free_port(host), free_port(host)
    kv = {"kv_connector": "MooncakeLayerwiseConnector", "kv_role": role, "kv_port": str(kv_port),
          "kv_connector_extra_config": EXTRA}
    tp = "2" if role == "kv_producer" else "1"
    proc = spawn([sys.executable, "-m", "simcluster.engine", "serve", "/models/ds_r1", "--host", host, "--port",
                  str(port), "--tensor-parallel-size", tp, "--served-model-name", "ds_r1",
                  "--kv-transfer-config", json.dumps(kv)],
                 sim_env(ASCEND_RT_VISIBLE_DEVICES="0,1" if tp == "2" else "0", SIMCLUSTER_NODE_DIR=node_dir, **env),
                 tmp / f"{role}-{port}.log")
    base = f"http://{host}:{port}"
    wait_http(base + "/health", proc=proc)
    return {"url": base, "kv_port": kv_port, "pid": proc.pid, "dir": node_dir, "log": tmp / f"{role}-{port}.log"}


@pytest.fixture
def lw(spawn, state_root):
    for name in ("p", "d"):
        (state_root / name).mkdir()
    p = start(spawn, state_root, "kv_producer", P_HOST, state_root / "p")
    d = start(spawn, state_root, "kv_consumer", D_HOST, state_root / "d", SIMCLUSTER_KV_PUSH_TIMEOUT_S="2")
    meta = Metaserver()
    yield {"p": p, "d": d, "meta": meta}
    meta.close()


def decode(lw, rid, prompt=PROMPT, metaserver=None, max_tokens=8):
    lw["meta"].requests[rid] = {"model": "ds_r1", "prompt": prompt}
    body = {"model": "ds_r1", "prompt": prompt, "max_tokens": max_tokens, "kv_transfer_params": {
        "do_remote_decode": False, "do_remote_prefill": True, "metaserver": metaserver or lw["meta"].url}}
    return call(lw["d"]["url"] + "/v1/completions", body, {"X-Request-Id": rid})


def test_the_decode_asks_the_metaserver_and_decodes_what_the_prefill_pushed(lw):
    p, d, meta = lw["p"], lw["d"], lw["meta"]
    meta.prefill = p["url"]
    status, out = decode(lw, "t1")
    assert status == 200, out
    assert out["usage"] == {"prompt_tokens": 300, "completion_tokens": 8, "total_tokens": 308}
    assert out["choices"][0]["text"].startswith("[simulated]") and out["kv_transfer_params"] is None
    (first,) = meta.calls
    assert set(first) == CONNECTOR_FIELDS
    assert {k: first[k] for k in ("token_ids", "request_id", "do_remote_prefill", "do_remote_decode",
                                  "remote_block_size", "remote_host", "remote_port", "remote_tp_size",
                                  "remote_pcp_size", "remote_dcp_size", "remote_cached_tokens")} == {
        "token_ids": [], "request_id": "cmpl-t1-0", "do_remote_prefill": False, "do_remote_decode": True,
        "remote_block_size": [128], "remote_host": D_HOST, "remote_port": d["kv_port"], "remote_tp_size": 1,
        "remote_pcp_size": 1, "remote_dcp_size": 1, "remote_cached_tokens": 0}
    assert len(first["remote_block_ids"]) == 1 and len(first["remote_block_ids"][0]) == 3
    pushed = profiles.held_bytes(profiles.profile_for("ds_r1"), 300)
    assert metric(p["url"], "simcluster:kv_transfer_bytes_total", direction="send", peer=d["url"][7:]) == pushed
    assert metric(d["url"], "simcluster:kv_transfers_total", direction="recv", outcome="ok", peer=p["url"][7:]) == 1
    assert metric(d["url"], "vllm:external_prefix_cache_hits_total") == 300
    assert metric(d["url"], "vllm:prompt_tokens_total") == 300  # vLLM counts the whole prompt ...
    assert metric(d["url"], "vllm:prompt_tokens_by_source_total", source="local_compute") == 0  # none computed
    assert metric(d["url"], "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 300
    # The Decode binds the side channel, the Prefill connects to it and binds nothing of its own.
    socket.create_connection((D_HOST, d["kv_port"]), timeout=2).close()
    with socket.socket() as s:
        s.bind((P_HOST, p["kv_port"]))
    # The same prompt again: the Decode's own prefix cache holds its 2 full blocks, the Prefill pushes the rest.
    status, _ = decode(lw, "t2")
    assert status == 200 and meta.calls[1]["remote_cached_tokens"] == 256
    assert metric(p["url"], "simcluster:kv_transfer_bytes_total", direction="send") == pushed + profiles.held_bytes(
        profiles.profile_for("ds_r1"), 300 - 256)


def test_a_push_that_never_comes_or_an_unreachable_metaserver_fails_the_request(lw):
    d = lw["d"]
    t0 = time.monotonic()
    status, out = decode(lw, "t3")  # the metaserver takes the call and sends no Prefill
    assert status == 500 and out["error"] == {"message": "Internal server error", "type": "InternalServerError",
                                              "param": None, "code": 500}
    assert "no KV pushed for cmpl-t3-0 within 2s" in d["log"].read_text()
    assert 2 <= time.monotonic() - t0 < 10
    nobody = f"http://{META_HOST}:{free_port(META_HOST)}/v1/metaserver"
    t0 = time.monotonic()
    status, out = decode(lw, "t4", metaserver=nobody)
    assert status == 500 and "unreachable after 3 tries" in d["log"].read_text()
    assert time.monotonic() - t0 < 2  # at once, not after the push timeout
    assert metric(d["url"], "vllm:request_success_total", finished_reason="error") == 2
    assert "Failed to connect to metaserver" in d["log"].read_text()


def test_corrupt_pushed_bytes_fail_the_decodes_check(lw):
    p, d, meta = lw["p"], lw["d"], lw["meta"]
    meta.prefill = p["url"]
    nodestate.set_fault(p["dir"], "corrupt_kv", p["pid"], True)
    time.sleep(0.3)  # the engine reads its faults at most every 0.2 s
    status, out = decode(lw, "t5")
    assert status == 500 and "failed verification" in d["log"].read_text()
    assert metric(d["url"], "simcluster:kv_transfers_total", direction="recv", outcome="checksum_error") == 1
