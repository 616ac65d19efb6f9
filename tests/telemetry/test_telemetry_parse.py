"""Reading /metrics: the real expositions of a simulated engine, pdproxy and mooncake_master parse into the values
the picture needs; a dead, slow or damaged target becomes a status with a clear reason, never an exception."""

import http.server
import threading
import time

import pytest

from apps.telemetry.scrape import GARBLED, OK, UNREACHABLE, read_target
from apps.telemetry.services import read_all
from tests.telemetry.telemetry_procs import MODEL, Cluster, start_mooncake_master

pytestmark = pytest.mark.procs  # every test here starts processes or servers


@pytest.fixture(scope="module")
def real_targets():
    """1P1D simulated engines behind a real pdproxy with three requests through it, and a mooncake_master."""
    c = Cluster()
    try:
        p, d = c.engine("prefill", model=MODEL), c.engine("decode", model=MODEL)
        proxy = c.proxy([p], [d])
        for i in range(3):
            status, _, _ = proxy.post("/v1/completions", {"model": MODEL, "prompt": f"request {i} " * 10,
                                                          "max_tokens": 4})
            assert status == 200
        yield {"p": p, "d": d, "proxy": proxy, "pool": start_mooncake_master(c)}
    finally:
        c.stop_all()


def test_engine_exposition(real_targets):
    # The Prefill frees a request's KV when the Decode's pull completes, just after the client's answer: poll.
    deadline = time.monotonic() + 60  # a deadline: beside the real engines both cores are busy
    while True:
        p = read_target("p0-dp0", "prefill", real_targets["p"].url + "/metrics")
        if p.status != OK or p.values["kv_usage"] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    d = read_target("d0-dp0", "decode", real_targets["d"].url + "/metrics")
    assert p.status == OK and d.status == OK, (p.reason, d.reason)
    assert p.values["running"] == 0 and p.values["waiting"] == 0 and p.values["kv_usage"] == 0
    assert p.values["prompt_tokens"] > 0 and p.values["ttft_count"] == 3
    assert d.values["generation_tokens"] == 12 and d.values["itl_count"] > 0 and d.values["ttft_sum"] > 0
    recv = d.values["kv_transfer_model_bytes"]
    assert [(x["peer"], x["direction"]) for x in recv] == [(real_targets["p"].addr, "recv")]
    assert recv[0]["bytes"] == pytest.approx(p.values["prompt_tokens"] * 192_512, rel=0.05)


def test_proxy_exposition(real_targets):
    r = read_target("proxy", "proxy", real_targets["proxy"].url + "/metrics")
    assert r.status == OK, r.reason
    p, d = real_targets["p"].addr, real_targets["d"].addr
    assert [(e["prefill"], e["decode"], e["requests"]) for e in r.values["edges"]] == [(p, d, 3.0)]
    assert r.values["edges"][0]["prompt_tokens"] > 0
    by = {(b["role"], b["backend"]): b for b in r.values["backends"]}
    assert by[("prefill", p)]["healthy"] is True and by[("prefill", p)]["state"] == "healthy"
    assert by[("decode", d)]["inflight"] == 0 and by[("decode", d)]["requests"] == 3


def test_mooncake_master_exposition(real_targets):
    r = read_target("kv-pool", "kv_pool", real_targets["pool"])
    assert r.status == OK, r.reason
    assert r.values["key_count"] == 0 and r.values["allocated_bytes"] == 0 and r.values["total_bytes"] is not None


@pytest.mark.parametrize("role", ["prefill", "decode", "proxy", "kv_pool"])
def test_real_pages_read_the_same_with_only_the_lines_their_reader_uses(real_targets, role):
    from apps.telemetry import scrape

    url = {"prefill": real_targets["p"].url + "/metrics", "decode": real_targets["d"].url + "/metrics",
           "proxy": real_targets["proxy"].url + "/metrics", "kv_pool": real_targets["pool"]}[role]
    text = scrape.fetch_text(url)
    whole = scrape.EXTRACTORS[role](scrape.parse_exposition(text))
    assert scrape.EXTRACTORS[role](scrape.parse_exposition(text, scrape.READS[role])) == whole
    assert scrape._split_page(text, scrape.READS[role]) is not None  # the filtered path, not its fallback
    if role == "proxy":
        assert whole["edges"] and scrape._split_page(text, scrape.READS[role])[1]  # edges by the strict reader


def test_a_target_of_the_wrong_kind_is_garbled_not_mistaken(real_targets):
    r = read_target("p0-dp0", "prefill", real_targets["proxy"].url + "/metrics")
    assert r.status == GARBLED and "no vllm: metrics" in r.reason


DAMAGED = {
    "truncated line": (b'vllm:num_requests_running{engine="0",model_name="m"', "not Prometheus text"),
    "html error page": (b"<html><body>502 Bad Gateway</body></html>", "not Prometheus text"),
    "value not a number": (b"vllm:num_requests_running 1.2.3\n", "not Prometheus text"),
    "unclosed label": (b'vllm:num_requests_running{engine="0} 1\n', "not Prometheus text"),
    "json": (b'{"status": "ok"}', "not Prometheus text"),
    "binary": (b"\x00\xff\xfe garbage", "not UTF-8"),
    "empty": (b"", "no vllm: metrics"),
}


class _Damaged(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        name = self.path.strip("/").replace("%20", " ")
        if name == "slow":
            time.sleep(3)
        if name == "500":
            self.send_response(500)
            self.end_headers()
            return
        body = DAMAGED.get(name, (b"",))[0]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def damaged_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Damaged)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_damaged_exposition_is_garbled_with_a_reason(damaged_server, name):
    r = read_target("p0-dp0", "prefill", f"{damaged_server}/{name.replace(' ', '%20')}")
    assert r.status == GARBLED and DAMAGED[name][1] in r.reason, r.reason


def test_refused_http_error_and_timeout_are_unreachable(damaged_server):
    from tests.telemetry.telemetry_procs import free_port

    refused = read_target("d0-dp0", "decode", f"http://127.0.0.1:{free_port('127.0.0.1')}/metrics")
    assert refused.status == UNREACHABLE and "refused" in refused.reason.lower()
    error = read_target("proxy", "proxy", f"{damaged_server}/500")
    assert error.status == UNREACHABLE and "HTTP 500" in error.reason
    slow = read_target("kv-pool", "kv_pool", f"{damaged_server}/slow")
    assert slow.status == UNREACHABLE and "read timeout" in slow.reason and slow.scrape_ms < 2900


def test_bad_targets_never_cost_the_others(real_targets, damaged_server):
    from apps.telemetry.live import TargetInfo

    targets = [TargetInfo("p0-dp0", "prefill", "p0", "127.0.0.1", 1, real_targets["p"].url + "/metrics"),
               TargetInfo("d0-dp0", "decode", "d0", "127.0.0.1", 2, f"{damaged_server}/slow"),
               TargetInfo("d1-dp0", "decode", "d1", "127.0.0.1", 3, f"{damaged_server}/binary"),
               TargetInfo("proxy", "proxy", "", "127.0.0.1", 4, real_targets["proxy"].url + "/metrics")]
    started = time.monotonic()
    readings = read_all(targets)
    assert [r.status for r in readings] == [OK, UNREACHABLE, GARBLED, OK]
    assert time.monotonic() - started < 2.9  # in parallel: the slow one bounds the round, not the sum
