"""Who may start a layerwise request's Prefill leg (pdproxy/layerwise.py): only its Decode, through the URL with the
token that Decode leg was given, from one of that Decode's hosts, naming the request's id and one of its hosts as
where the KV goes. The X-Request-Id (so the request id) is the client's: before the token, any client could post
params for its own request and have a Prefill push a prompt's KV to any host it named.

Most tests play the Decode themselves: the fake Decode (fake_backend.py) records the leg and answers at once but
never calls the metaserver, so the only calls are the ones a test makes, from a source address it binds
(127.0.0.0/8 is all loopback on Linux), and the fake Prefill records every request it got."""

from __future__ import annotations

import http.client
import json
import re
import secrets
import threading

import pytest

from tests.pdproxy.proxy_procs import sse_events, wait_until
from tests.pdproxy.test_layerwise import chat as sim_chat
from tests.pdproxy.test_layerwise import completion as sim_completion
from tests.pdproxy.test_layerwise import engine, layerwise_proxy

ATTACKER = "127.0.0.66"  # a client of the proxy, elsewhere
OTHER = "127.0.0.2"  # neither the client nor the Decode


def post_from(source: str, url: str, body, timeout: float = 20.0):
    """POST `body` to `url` on a connection bound to `source`: (status, headers, body)."""
    assert url.startswith("http://")
    hostport, _, path = url[7:].partition("/")
    host, port = hostport.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout, source_address=(source, 0))
    try:
        conn.request("POST", "/" + path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


class InFlight:
    """A client request running in a thread until the proxy answers it."""

    def __init__(self, proxy, path: str, body: dict, rid: str):
        self.answer = None
        self.ended = threading.Event()

        def run():
            try:
                self.answer = proxy.post(path, body, {"X-Request-Id": rid}, timeout=60)
            finally:
                self.ended.set()

        threading.Thread(target=run, daemon=True).start()

    def result(self, timeout: float = 30.0):
        assert self.ended.wait(timeout), f"the client's request was not answered within {timeout:g}s"
        assert self.answer is not None, "the client's request failed without an HTTP answer"
        return self.answer


def fake_chat(**kw):
    return {"model": "fake-model", "messages": [{"role": "user", "content": "a private prompt"}], "max_tokens": 4,
            **kw}


def records(backend) -> list[dict]:
    return backend.stats()["requests"]


def decode_leg_url(d, rid: str) -> str:
    """The metaserver URL the proxy gave the (fake) Decode in the leg of request `rid`, once that leg arrived."""
    legs = lambda: [r for r in records(d) if r["request_id"] == rid and r["leg"] == "decode"]  # noqa: E731
    assert wait_until(legs, timeout=15), f"the Decode leg of request {rid} did not reach the fake Decode"
    return legs()[-1]["kv_transfer_params"]["metaserver"]


def decode_params(request_id: str, remote_host: str = "127.0.0.1") -> dict:
    """What a Decode's connector posts to the metaserver (docs/ascend-pd-launch-facts.md §2.6, 2.)."""
    return {"token_ids": [], "request_id": request_id, "do_remote_prefill": False, "do_remote_decode": True,
            "remote_block_ids": [[7, 8, 9]], "remote_block_size": [128], "remote_engine_id": "decode-engine",
            "remote_host": remote_host, "remote_port": 4444, "remote_tp_size": 1, "remote_pcp_size": 1,
            "remote_dcp_size": 1, "remote_cached_tokens": 0}


def prefill_hosts(p) -> list:
    """remote_host of every request the Prefill got (whatever it took it for)."""
    return [(r["kv_transfer_params"] or {}).get("remote_host") for r in records(p)]


def fakes(cluster, *args):
    p, d = cluster.backend("prefill"), cluster.backend("decode")
    return p, d, layerwise_proxy(cluster, [p], [d], *args)


@pytest.mark.procs
def test_a_client_cannot_post_params_for_its_own_request(cluster):
    """The exact forgery: a client sends a request under an X-Request-Id it chose and, while it waits, posts params
    naming its own host for that request's id to /v1/metaserver (as the Decodes were told to) and to a guessed
    token. Neither reaches the Prefill; the real Decode's call (played here) still serves the request."""
    p, d, proxy = fakes(cluster)
    client = InFlight(proxy, "/v1/chat/completions", fake_chat(), "mine-1")
    url = decode_leg_url(d, "mine-1")
    forged = decode_params("chatcmpl-mine-1", remote_host=ATTACKER)
    answers = [post_from(ATTACKER, proxy.url + "/v1/metaserver", forged),
               post_from(ATTACKER, proxy.url + "/v1/metaserver/" + secrets.token_urlsafe(24), forged),
               post_from("127.0.0.1", proxy.url + "/v1/metaserver", forged)]
    assert prefill_hosts(p) == [], "the Prefill was sent the forged params"
    assert [status for status, _, _ in answers] == [404, 404, 404], answers
    assert all(json.loads(raw)["error"]["type"] == "NotFoundError" for _, _, raw in answers)
    assert not client.ended.is_set()
    assert url.startswith(proxy.url + "/v1/metaserver/") and len(url) > len(proxy.url + "/v1/metaserver/") + 20

    status, _, raw = post_from("127.0.0.1", url, decode_params("chatcmpl-mine-1"))  # the Decode's own call
    assert (status, json.loads(raw)) == (200, {"status": "ok"})
    status, _, raw = client.result()
    assert status == 200, raw
    assert prefill_hosts(p) == ["127.0.0.1"]
    assert proxy.metric("pdproxy_metaserver_calls_total", found="none") == 3
    assert proxy.metric("pdproxy_metaserver_calls_total", found="this_worker") == 1


FORGERIES = {
    # (source address, params): the right token in each
    "another caller": (OTHER, decode_params("chatcmpl-mine-2")),
    "another remote_host": ("127.0.0.1", decode_params("chatcmpl-mine-2", remote_host=ATTACKER)),
    "another request_id": ("127.0.0.1", decode_params("chatcmpl-someone-else")),
}


@pytest.mark.procs
@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_call_with_the_right_url_is_refused_unless_it_is_the_decodes_own(cluster, forgery, workers):
    """With the URL the Decode was given, a call from another address, or naming another host for the KV or another
    request, is refused (403), goes nowhere, and leaves the request waiting for its Decode's own call. With two
    workers each call is made on a new connection, so some reach the worker holding the request and some are
    forwarded through the supervisor: the holder checks both alike."""
    p, d, proxy = fakes(cluster, "--workers", workers)
    client = InFlight(proxy, "/v1/chat/completions", fake_chat(stream=True), "mine-2")
    url = decode_leg_url(d, "mine-2")
    source, params = FORGERIES[forgery]
    tries = 6 if workers == "2" else 1
    answers = [post_from(source, url, params) for _ in range(tries)]
    assert prefill_hosts(p) == [], "the Prefill was sent the refused call's params"
    assert [status for status, _, _ in answers] == [403] * tries, answers
    error = json.loads(answers[0][2])["error"]
    assert error["type"] == "PermissionDeniedError" and error["message"].startswith("metaserver call refused: ")
    assert url.rsplit("/", 1)[1] not in error["message"]
    assert proxy.metric("pdproxy_metaserver_calls_total", found="refused") == tries
    assert proxy.metric("pdproxy_errors_total", cause="metaserver_refused") == tries

    if workers == "2":  # a token like it, for either worker: no worker holds it
        index = url.rsplit("/", 1)[1].partition(".")[0]
        for other in ("0", "1"):
            forged = url.rsplit("/", 1)[0] + f"/{other}." + secrets.token_urlsafe(24)
            assert [post_from("127.0.0.1", forged, decode_params("chatcmpl-mine-2"))[0] for _ in range(4)] == [404] * 4
        assert index in ("0", "1")
    assert not client.ended.is_set()
    status, _, raw = post_from("127.0.0.1", url, decode_params("chatcmpl-mine-2"))
    assert (status, json.loads(raw)) == (200, {"status": "ok"})
    status, _, raw = client.result()
    assert status == 200 and sse_events(raw)[-1] == "[DONE]", raw
    assert prefill_hosts(p) == ["127.0.0.1"]


@pytest.mark.procs
def test_a_refused_call_leaves_the_request_to_time_out_without_showing_the_token(cluster):
    """The Decode never calls: the client's 504 says a call was refused, and neither it nor anything else the client
    is sent holds the token; once the request ended its URL is dead, even for the Decode."""
    p, d, proxy = fakes(cluster, "--first-byte-timeout", "10")  # the margin for the refused call to come first
    client = InFlight(proxy, "/v1/completions", {"model": "fake-model", "prompt": "a private prompt",
                                                 "max_tokens": 4}, "mine-3")
    url = decode_leg_url(d, "mine-3")
    token = url.rsplit("/", 1)[1]
    status, _, raw = post_from(OTHER, url, decode_params("cmpl-mine-3-0"))
    assert not client.ended.is_set(), "the request timed out before the refused call was made (machine too slow?)"
    assert status == 403 and token not in raw.decode()
    status, headers, raw = client.result()
    assert status == 504, raw
    assert json.loads(raw)["error"]["message"] == ("no Prefill pushed KV for cmpl-mine-3-0 within the first-byte "
                                                   "timeout (a metaserver call for it was refused; the proxy's log "
                                                   "says why)")
    assert token not in raw.decode() and token not in json.dumps(headers)
    status, _, raw = post_from("127.0.0.1", url, decode_params("cmpl-mine-3-0"))
    assert status == 404 and token not in raw.decode()
    assert prefill_hosts(p) == []


@pytest.mark.procs
def test_decode_hosts_lets_a_decodes_other_nodes_call(cluster):
    """--decode-hosts: a Decode whose DP ranks run on other nodes calls from them and names them; a call from one of
    them is taken, and its remote_host goes to the Prefill. Any other address still is not."""
    p, d = cluster.backend("prefill"), cluster.backend("decode")
    node_b = "127.0.0.7"
    proxy = layerwise_proxy(cluster, [p], [d], "--decode-hosts", f"{d.addr}={node_b}")
    client = InFlight(proxy, "/v1/chat/completions", fake_chat(), "mine-4")
    url = decode_leg_url(d, "mine-4")
    assert post_from(OTHER, url, decode_params("chatcmpl-mine-4", remote_host=node_b))[0] == 403
    assert post_from(node_b, url, decode_params("chatcmpl-mine-4", remote_host=OTHER))[0] == 403
    status, _, raw = post_from(node_b, url, decode_params("chatcmpl-mine-4", remote_host=node_b))
    assert (status, json.loads(raw)) == (200, {"status": "ok"})
    assert client.result()[0] == 200
    assert prefill_hosts(p) == [node_b]


SEND = re.compile(r"Send request: (\S+) to proxy metaserver: (\S+)")


@pytest.mark.procs
@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_simulated_engines_still_serve_every_kind_of_request(cluster, tmp_path, workers):
    """The real flow with the token: chat and completion, streamed and whole, with one and two workers. Each Decode
    attempt got its own URL, the Decode's call was taken, and no token reached the client."""
    p, d = engine(cluster, tmp_path, "prefill"), engine(cluster, tmp_path, "decode")
    proxy = layerwise_proxy(cluster, [p], [d], "--workers", workers)
    cases = [("/v1/completions", sim_completion()), ("/v1/completions", sim_completion(stream=True)),
             ("/v1/chat/completions", sim_chat()), ("/v1/chat/completions", sim_chat(stream=True))]
    answers = []
    for i, (path, body) in enumerate(cases * 2):  # each on a new connection: with two workers, either one
        status, headers, raw = proxy.post(path, body, {"X-Request-Id": f"sec-{i}"})
        assert status == 200, raw
        assert (sse_events(raw)[-1] == "[DONE]") if body["stream"] else json.loads(raw)["choices"]
        answers.append(json.dumps(headers) + raw.decode())
    sent = SEND.findall(d.logged())
    assert len(sent) == 8
    urls = [url for _, url in sent]
    assert len(set(urls)) == 8 and all(u.startswith(f"http://127.0.0.1:{proxy.port}/v1/metaserver/") for u in urls)
    tokens = [u.rsplit("/", 1)[1] for u in urls]
    assert not any(t in a for t in tokens for a in answers)
    taken = sum(proxy.metric("pdproxy_metaserver_calls_total", found=f) for f in ("this_worker", "other_worker"))
    assert taken == 8 and proxy.metric("pdproxy_metaserver_calls_total", found="refused") == 0
    assert p.metric("simcluster:kv_transfers_total", direction="send", outcome="ok", peer=d.addr) == 8
    # a Decode's call replayed once its request has ended: the URL is dead
    request_id, url = sent[0]
    assert post_from("127.0.0.1", url, decode_params(request_id))[0] == 404


@pytest.mark.parametrize("argv, message", [
    (["--decode-hosts", "127.0.0.1:9000=10.0.0.2"],
     "decode_hosts: '127.0.0.1:9000=10.0.0.2': '127.0.0.1:9000' is not one of the Decode instances"),
    (["--decode-hosts", "127.0.0.1:8001=10.0.0.2:7100"],
     "decode_hosts: '127.0.0.1:8001=10.0.0.2:7100': '10.0.0.2:7100' is not an IP address or a host name"),
    (["--decode-hosts", "127.0.0.1:8001=10.0.0.2,,10.0.0.3"],
     "decode_hosts: '127.0.0.1:8001=10.0.0.2,,10.0.0.3': '' is not an IP address or a host name"),
    (["--decode-hosts", "127.0.0.1:8001=http://10.0.0.2"], "'http://10.0.0.2' is not an IP address or a host name"),
    (["--decode-hosts", "127.0.0.1:8001=0.0.0.0"], "'0.0.0.0' is a wildcard"),
    (["--decode-hosts", "127.0.0.1:8001"], "decode_hosts: '127.0.0.1:8001' is not API_HOST:PORT=ADDR[,ADDR...]"),
    (["--decode-hosts", "node-a=10.0.0.2"], "decode_hosts: 'node-a=10.0.0.2': not a HOST:PORT address"),
])
def test_decode_hosts_are_checked_before_start(argv, message):
    from pdproxy.cli import config_from_args
    from pdproxy.config import ConfigError

    base = ["--pd-flow", "layerwise", "--prefill", "127.0.0.1:8000", "--decode", "127.0.0.1:8001", "127.0.0.1:8002"]
    with pytest.raises(ConfigError) as err:
        config_from_args([*base, *argv])
    assert message in str(err.value)


def test_decode_hosts_forms(tmp_path):
    from pdproxy.cli import config_from_args
    from pdproxy.config import ConfigError, parse_decode_hosts

    base = ["--pd-flow", "layerwise", "--decode", "127.0.0.1:8001", "[::1]:8002", "localhost:8003"]
    cfg = config_from_args([*base, "--decode-hosts", "127.0.0.1:8001=10.0.0.2,NODE-B.example.",
                            "[::1]:8002=::ffff:10.0.0.9,[fe80::1]", "--decode-hosts", "127.0.0.1:8001=10.0.0.3"])
    assert parse_decode_hosts(cfg.decode_hosts, cfg.decode) == {
        "127.0.0.1:8001": ("10.0.0.2", "node-b.example", "10.0.0.3"), "::1:8002": ("10.0.0.9", "fe80::1")}
    config = tmp_path / "proxy.yaml"
    config.write_text("pd_flow: layerwise\ndecode: [127.0.0.1:8001, localhost:8003]\n"
                      "decode_hosts:\n  127.0.0.1:8001: [10.0.0.2, 10.0.0.3]\n  localhost:8003: 10.0.0.4,10.0.0.5\n")
    cfg = config_from_args(["--config", str(config)])
    assert parse_decode_hosts(cfg.decode_hosts, cfg.decode) == {
        "127.0.0.1:8001": ("10.0.0.2", "10.0.0.3"), "localhost:8003": ("10.0.0.4", "10.0.0.5")}
    with pytest.raises(ConfigError, match="read by the layerwise flow only"):
        config_from_args(["--decode", "127.0.0.1:8001", "--decode-hosts", "127.0.0.1:8001=10.0.0.2"])
