"""Dropping the lines no reader uses before prometheus_client parses a page, and the proxy's P×D edge counters
read by a strict line pattern, give the very values (or the very reason a page is refused) that parsing the whole
page with the library gives."""

from pathlib import Path

import pytest

from apps.telemetry import scrape
from apps.telemetry.scrape import EXTRACTORS, GARBLED, OK, READS, read_target
from pdproxy.metrics import Metrics

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.txt"))
ROLES = ("prefill", "kv_pool", "proxy")


def read(text: str, role: str, *, whole: bool) -> tuple[str, str, dict]:
    reads, scrape.READS = scrape.READS, ({} if whole else READS)
    try:
        r = read_target("t", role, "http://t/metrics", fetch=lambda _url: text)
    finally:
        scrape.READS = reads
    return r.status, r.reason, r.values


def assert_same(text: str, role: str) -> tuple[str, str, dict]:
    whole, filtered = read(text, role, whole=True), read(text, role, whole=False)
    assert filtered == whole
    return filtered


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_every_recorded_page_reads_the_same_filtered_for_every_reader(fixture, role):
    # A page read by the wrong reader must be refused with the same reason too (the marker fallback).
    status, reason, values = assert_same(fixture.read_text(), role)
    right = "kv_pool" if fixture.stem.startswith("mooncake") else "prefill"
    assert (status == OK) == (role == right), reason
    if status == OK:
        assert values


def proxy_page(pairs: int = 3) -> str:
    backend = type("Backend", (), {"inflight": 1, "state": "healthy"})
    pools = [type("Pool", (), {"role": role, "backends": [type("B", (backend,), {"addr": f"10.0.0.{k}:{port}"})
                                                          for k in range(pairs)]})
             for role, port in (("prefill", 8000), ("decode", 9000))]
    m = Metrics(lambda: pools)
    for p in range(pairs):
        for d in range(pairs):
            m.edge(f"10.0.0.{p}:8000", f"10.0.0.{d}:9000", 100 * p + d)
            m.backend("prefill", f"10.0.0.{p}:8000", "ok")
    m.request("/v1/completions", 200)
    m.observe(m.ttft, "/v1/completions", 0.2)
    m.observe(m.duration, "/v1/completions", 0.9)
    return m.render().decode()


def test_a_pdproxy_page_reads_the_same_and_its_edges_skip_the_library(monkeypatch):
    text = proxy_page()
    status, _, values = assert_same(text, "proxy")
    assert status == OK and len(values["edges"]) == 9
    assert {(e["prefill"], e["decode"]): e["prompt_tokens"] for e in values["edges"]}[
        ("10.0.0.2:8000", "10.0.0.1:9000")] == 201
    parsed: list[str] = []
    real = scrape._parse_library
    monkeypatch.setattr(scrape, "_parse_library", lambda t: parsed.append(t) or real(t))
    EXTRACTORS["proxy"](scrape.parse_exposition(text, READS["proxy"]))
    assert len(parsed) == 1
    assert "pdproxy_edge_" not in parsed[0] and "pdproxy_request_duration_seconds" not in parsed[0]
    assert "# HELP" not in parsed[0] and "pdproxy_backend_state{" in parsed[0]


EDGE = 'pdproxy_edge_requests_total{decode="10.0.0.0:9000",prefill="10.0.0.1:8000"} 1.0'


def edge_line(replacement: str):
    return lambda text: text.replace(EDGE, replacement)


@pytest.mark.parametrize("change", [
    ("labels in the other order", edge_line('pdproxy_edge_requests_total{prefill="10.0.0.1:8000",decode="10.0.0.0:9000"} 1.0')),
    ("an escaped quote in a label value",
     edge_line(r'pdproxy_edge_requests_total{decode="10.0.0.0:9000",prefill="10.0.0.1:8000\""} 1.0')),
    ("a third label", edge_line('pdproxy_edge_requests_total{decode="10.0.0.0:9000",prefill="10.0.0.1:8000",x="y"} 1.0')),
    ("a trailing comma", edge_line('pdproxy_edge_requests_total{decode="10.0.0.0:9000",prefill="10.0.0.1:8000",} 1.0')),
    ("a timestamp", edge_line(EDGE + " 1700000000000")),
    ("a NaN value", edge_line(EDGE.replace(" 1.0", " NaN"))),
    ("an Inf value", edge_line(EDGE.replace(" 1.0", " +Inf"))),
    ("an underscore in a value", edge_line(EDGE.replace(" 1.0", " 1_0"))),
    ("a value that is no number", edge_line(EDGE.replace(" 1.0", " x"))),
    ("two spaces before the value", edge_line(EDGE.replace(" 1.0", "  1.0"))),
    ("counters named without _total", lambda t: t.replace("pdproxy_edge_requests_total{", "pdproxy_edge_requests{")),
    ("CRLF line ends", lambda t: t.replace("\n", "\r\n")),
], ids=lambda c: c[0])
def test_odd_edge_lines_fall_back_to_the_library_with_the_same_result(change):
    text = change[1](proxy_page())
    assert text != proxy_page()
    assert_same(text, "proxy")


def test_a_page_with_only_unread_families_says_what_the_whole_page_would():
    page = "# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_count 3\n"
    assert assert_same(page, "prefill")[0] == OK  # a vLLM page that shows none of what the picture reads
    assert assert_same("pdproxy_requests_total 3\n", "prefill")[:2] == (GARBLED, "no vllm: metrics in the exposition")
    assert "the PD proxy's metrics" in assert_same(proxy_page(), "kv_pool")[1]


def test_a_damaged_line_the_readers_use_still_fails_the_target_and_one_they_do_not_is_dropped():
    good = (Path(__file__).parent / "fixtures" / "engine-simcluster.txt").read_text()
    used = good.replace('vllm:num_requests_waiting{engine="0",model_name="qwen3-235b"} 0.0',
                        'vllm:num_requests_waiting{engine="0",model_name="qwen3-235b} 0.0')
    assert read(used, "prefill", whole=False)[0] == GARBLED
    unused = good + 'vllm:e2e_request_latency_seconds_count{engine="0} 1.0\n'
    assert read(unused, "prefill", whole=True)[0] == GARBLED
    assert read(unused, "prefill", whole=False) == read(good, "prefill", whole=True)


class _Watched(dict):
    """Samples that note every name an extractor asks for."""

    def __init__(self, *args):
        super().__init__(*args)
        self.asked: set[str] = set()

    def get(self, name, default=None):
        self.asked.add(name)
        return super().get(name, default)

    def __contains__(self, name):
        self.asked.add(name)
        return super().__contains__(name)


@pytest.mark.parametrize("fixture", FIXTURES + [None], ids=lambda p: p.stem if p else "pdproxy")
def test_every_name_an_extractor_asks_for_is_in_its_reads(fixture):
    role = "proxy" if fixture is None else "kv_pool" if fixture.stem.startswith("mooncake") else "prefill"
    samples = _Watched(scrape.parse_exposition(proxy_page() if fixture is None else fixture.read_text()))
    # The older names too: a page with the newer ones lacking makes the extractor ask for its fallbacks.
    for page in (samples, _Watched({k: v for k, v in samples.items() if "inter_token" not in k
                                    and not k.startswith(("vllm:kv_cache", "vllm:prefix_cache"))})):
        EXTRACTORS[role](page)
        reads = READS[role]
        assert page.asked
        assert {n for n in page.asked if n not in reads.names and not n.startswith(reads.prefixes)} == set()
