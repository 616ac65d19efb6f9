"""What real engines and masters expose, from recorded pages (tests/telemetry/fixtures/): prefix-cache hit rates
(vLLM's names and the older gpu_* ones), the KV connector's pool hits, preemptions, requests by finish reason; a
mooncake_master that leaves zero-valued series out reads as idle; a body in another format says which it looks like.
"""

from pathlib import Path

import pytest

from apps.telemetry.live import TargetInfo, live_state
from apps.telemetry.scrape import GARBLED, OK, TargetReading, read_target
from apps.telemetry.selectors import live_view

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def page(name: str) -> str:
    return (FIXTURES / name).read_text()


def read(role: str, body: str, key: str = "t") -> TargetReading:
    return read_target(key, role, "http://127.0.0.1:1/metrics", fetch=lambda url: body)


# --- engines -----------------------------------------------------------------------------------------------------

def test_simcluster_engine_page_gives_prefix_hits_preemptions_finish_reasons_and_store_blocks():
    r = read("prefill", page("engine-simcluster.txt"))
    assert r.status == OK, r.reason
    v = r.values
    assert (v["prefix_queries"], v["prefix_hits"]) == (484.0, 256.0)
    assert v["external_queries"] is None and v["external_hits"] is None  # no KV-connector series on this page
    assert v["preemptions"] == 2.0
    assert v["success"] == {"length": 1.0, "stop": 3.0}
    assert {(b["tier"], b["op"]): b["blocks"] for b in v["store_blocks"]} == {
        ("mooncake", "load"): 16.0, ("mooncake", "backup"): 22.0, ("ascendstore", "backup"): 22.0}


def test_older_vllm_names_are_read_and_dp_engines_summed():
    r = read("decode", page("engine-vllm-0.8-names.txt"))
    assert r.status == OK, r.reason
    v = r.values
    assert (v["prefix_queries"], v["prefix_hits"]) == (10000.0, 4000.0)  # vllm:gpu_prefix_cache_*, both engines
    assert v["kv_usage"] == 0.41  # vllm:gpu_cache_usage_perc, the fuller engine
    assert v["itl_count"] == 1580.0  # vllm:time_per_output_token_seconds
    assert v["preemptions"] == 5.0
    assert v["success"] == {"abort": 1.0, "length": 3.0, "stop": 16.0}


def test_kv_connector_lookups_are_the_pool_hits():
    v = read("prefill", page("engine-vllm-connector.txt")).values
    assert (v["prefix_queries"], v["prefix_hits"]) == (8192.0, 1024.0)
    assert (v["external_queries"], v["external_hits"]) == (7168.0, 3584.0)


# --- mooncake_master ---------------------------------------------------------------------------------------------

def test_busy_master_page():
    r = read("kv_pool", page("mooncake-master-busy.txt"))
    assert r.status == OK, r.reason
    v = r.values
    assert (v["key_count"], v["allocated_bytes"], v["total_bytes"], v["active_clients"]) == (1200, 1.5e9, 4e9, 3)
    # 50 single + 2000 batch existence checks; 40 single loads (10 failed) + 1000 batch items (250 failed);
    # 30 single puts + 1200 batch items.
    assert (v["lookups"], v["loads"], v["load_failures"], v["puts"]) == (2050.0, 780.0, 260.0, 1230.0)
    assert v["master_series"] > 0


def test_master_that_omits_zero_series_is_idle_not_garbled():
    r = read("kv_pool", page("mooncake-master-omits-zeros.txt"))
    assert r.status == OK, r.reason
    v = r.values
    assert (v["key_count"], v["allocated_bytes"], v["lookups"], v["loads"], v["puts"]) == (0, 0, 0, 0, 0)
    assert v["total_bytes"] == 4294967296.0 and v["active_clients"] == 2.0


@pytest.mark.parametrize("body", ["", "# HELP master_key_count Total number of keys\n# TYPE master_key_count gauge\n",
                                  "# nothing yet\n"])
def test_master_with_no_master_series_at_all_is_an_idle_ok(body):
    r = read("kv_pool", body, key="kv-pool")
    assert r.status == OK, r.reason
    assert r.values["key_count"] == 0 and r.values["master_series"] == 0
    state = live_state(deployment_id=1, at=10.0, targets=[TargetInfo("kv-pool", "kv_pool", "", "h", 1, "u")],
                       readings=[r], kv_bytes_per_token=None, previous=None)
    pool = state["services"]["kv-pool"]
    assert pool["status"] == OK and "idle" in pool["note"] and "omit zero" in pool["note"]


def test_an_engine_page_where_the_master_should_be_is_garbled_and_says_whose_it_is():
    r = read("kv_pool", page("engine-vllm-connector.txt"))
    assert r.status == GARBLED and "vLLM engine's metrics, not mooncake_master's" in r.reason


# --- bodies that are not Prometheus text -------------------------------------------------------------------------

@pytest.mark.parametrize(("role", "body", "looks"), [
    ("kv_pool", "<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head></html>", "HTML"),
    ("prefill", "<html><body>502 Bad Gateway</body></html>", "HTML"),
    ("decode", '{"detail": "Not Found"}', "JSON"),
    ("kv_pool", '\n  [{"key": "a"}]', "JSON"),
    ("proxy", "<?xml version='1.0'?><error/>", "XML/HTML"),
])
def test_a_body_in_another_format_says_what_it_looks_like(role, body, looks):
    r = read(role, body)
    assert r.status == GARBLED
    assert r.reason.startswith(f"not Prometheus text (looks like {looks}"), r.reason


def test_plain_text_that_does_not_parse_is_still_not_prometheus_text():
    r = read("kv_pool", "Service Unavailable\n")
    assert r.status == GARBLED and r.reason.startswith("not Prometheus text: "), r.reason


# --- rates over a window -----------------------------------------------------------------------------------------

def engine(queries, hits, *, ext=None, preempt=0.0, success=None, blocks=None):
    return {"running": 1, "waiting": 0, "kv_usage": 0.2, "prompt_tokens": queries, "generation_tokens": 0,
            "ttft_count": 0, "ttft_sum": 0, "itl_count": 0, "itl_sum": 0, "prefix_queries": queries,
            "prefix_hits": hits, "external_queries": ext[0] if ext else None, "external_hits": ext[1] if ext else None,
            "preemptions": preempt, "success": success or {}, "kv_transfer_model_bytes": [],
            "store_blocks": [{"tier": t, "op": o, "blocks": n} for (t, o), n in (blocks or {}).items()]}


TARGETS = [TargetInfo("p0-dp0", "prefill", "p0", "10.0.0.1", 7100, "u"),
           TargetInfo("p0-dp1", "prefill", "p0", "10.0.0.2", 7100, "u"),
           TargetInfo("kv-pool", "kv_pool", "", "10.0.0.9", 50088, "u")]


def master(lookups, loads, puts, keys=10, allocated=1e9, capacity=4e9):
    return {"key_count": keys, "allocated_bytes": allocated, "total_bytes": capacity, "active_clients": 2,
            "lookups": lookups, "loads": loads, "load_failures": 0, "puts": puts, "evicted_keys": 0,
            "master_series": 20}


def round_(at, a, b, pool, previous=None):
    readings = [TargetReading("p0-dp0", "prefill", "u", values=a), TargetReading("p0-dp1", "prefill", "u", values=b),
                TargetReading("kv-pool", "kv_pool", "u", values=pool)]
    return live_state(deployment_id=1, at=at, targets=TARGETS, readings=readings, kv_bytes_per_token=None,
                      previous=previous)


def test_hit_rates_preemptions_and_finish_reasons_over_the_window_and_since_start():
    first = round_(100.0, engine(1000, 100, ext=(900, 0), preempt=1, success={"stop": 4},
                                 blocks={("mooncake", "load"): 0, ("mooncake", "backup"): 10}),
                   engine(1000, 300, ext=(700, 100), success={"stop": 6, "length": 1}), master(100, 50, 200))
    second = round_(110.0, engine(3000, 1100, ext=(1900, 500), preempt=3, success={"stop": 14, "abort": 1},
                                  blocks={("mooncake", "load"): 20, ("mooncake", "backup"): 30}),
                    engine(2000, 500, ext=(1500, 300), success={"stop": 6, "length": 1}), master(300, 200, 260),
                    previous=first)
    p0 = second["instances"]["p0"]
    # window: (1000 + 200) hits of (2000 + 1000) queries; since start: 1600 of 5000
    assert p0["prefix_hit_rate"] == pytest.approx(0.4) and p0["prefix_hit_rate_total"] == pytest.approx(0.32)
    # the connector's (pool) lookups: (500 + 200) of (1000 + 800) in the window, 800 of 3400 since start
    assert p0["connector_hit_rate"] == pytest.approx(700 / 1800) and p0["connector_hit_rate_total"] == pytest.approx(800 / 3400)
    assert p0["connector_hit_tok_s"] == pytest.approx(70.0)
    assert p0["preemptions"] == 3.0 and p0["preempt_s"] == pytest.approx(0.2)
    assert p0["success"] == {"stop": 20.0, "abort": 1.0, "length": 1.0}
    assert p0["success_s"] == {"stop": pytest.approx(1.0), "abort": pytest.approx(0.1), "length": 0.0}
    assert p0["store_blocks"]["mooncake"] == {"load": 20.0, "backup": 30.0, "load_s": 2.0, "backup_s": 2.0}

    pool = second["services"]["kv-pool"]
    assert pool["status"] == OK and pool["note"] == ""
    assert (pool["lookup_s"], pool["load_s"], pool["put_s"]) == (20.0, 15.0, 6.0)
    assert pool["used"] == pytest.approx(0.25) and pool["key_count"] == 10

    summary = second["pool"]
    assert summary["master"] == "kv-pool" and summary["hit_tok_s"] == pytest.approx(70.0)
    # the pool's hit rate is the Prefills' connector lookups: as p0's, both processes summed
    assert summary["hit_rate"] == pytest.approx(700 / 1800) and summary["hit_rate_total"] == pytest.approx(800 / 3400)
    assert summary["tiers"]["mooncake"]["load_s"] == 2.0

    view = live_view(second, [], now=111.0)
    assert view["pool"] == summary and view["instances"]["p0"]["prefix_hit_rate"] == pytest.approx(0.4)


def test_first_round_and_quiet_window_give_totals_but_no_window_rates():
    first = round_(100.0, engine(1000, 250), engine(0, 0), master(10, 5, 10))
    p0 = first["instances"]["p0"]
    assert p0["prefix_hit_rate"] is None and p0["prefix_hit_rate_total"] == 0.25 and p0["preempt_s"] is None
    assert p0["connector_hit_rate"] is None and p0["connector_hit_rate_total"] is None  # no connector series at all
    assert first["services"]["kv-pool"]["lookup_s"] is None and first["services"]["kv-pool"]["lookups"] == 10
    assert first["pool"]["hit_rate"] is None and first["pool"]["hit_rate_total"] is None
    quiet = round_(105.0, engine(1000, 250), engine(0, 0), master(10, 5, 10), previous=first)
    assert quiet["instances"]["p0"]["prefix_hit_rate"] is None  # nothing looked up in the window: no rate, not 0
    assert quiet["instances"]["p0"]["prefix_hit_rate_total"] == 0.25
    assert quiet["services"]["kv-pool"]["lookup_s"] == 0.0


def test_a_restarted_engine_counts_from_zero_and_a_round_stored_before_these_fields_gives_no_spike():
    first = round_(100.0, engine(5000, 2000, preempt=9), engine(0, 0), master(0, 0, 0))
    restarted = round_(105.0, engine(100, 50, preempt=1), engine(0, 0), master(0, 0, 0), previous=first)
    p0 = restarted["instances"]["p0"]
    assert p0["prefix_hit_rate"] == pytest.approx(0.5) and p0["preempt_s"] == pytest.approx(0.2)

    old = {**first, "targets": [{**t, "values": {k: v for k, v in t["values"].items()
                                                 if k not in ("prefix_hits", "prefix_queries", "preemptions",
                                                              "success", "lookups", "loads", "puts")}}
                                for t in first["targets"]]}
    after_upgrade = round_(105.0, engine(6000, 2500, preempt=10, success={"stop": 3}), engine(0, 0),
                           master(10, 5, 10), previous=old)
    p0 = after_upgrade["instances"]["p0"]
    assert p0["prefix_hit_rate"] is None and p0["preempt_s"] is None and p0["success_s"] == {}
    assert after_upgrade["services"]["kv-pool"]["lookup_s"] is None
    assert p0["prompt_tok_s"] == 200.0  # the fields the old round had still give rates


def test_targets_skip_headless_engines_and_a_memcache_meta_service():
    from types import SimpleNamespace

    from apps.telemetry.services import scrape_targets

    def proc(key, role, ports, instance=""):
        return SimpleNamespace(key=key, role=role, instance=instance, address="10.0.0.1", ports=ports)

    running = [proc("p0", "prefill", [7100], "p0"), proc("p0-n1", "prefill", [], "p0"),
               proc("kv-pool", "kv_pool", [5000, 8000]), proc("store-0", "store", [11211])]
    assert [(t.key, t.metrics_url) for t in scrape_targets(running)] == [
        ("p0", "http://10.0.0.1:7100/metrics"), ("kv-pool", "http://10.0.0.1:8000/metrics")]
    assert [t.key for t in scrape_targets(running, pool_backend="memcache")] == ["p0"]


def test_a_decodes_connector_hits_are_kv_from_prefill_not_pool_hits():
    """On a Decode, vLLM's external_prefix_cache_* count what MooncakeConnectorV1 pulled from Prefill: they stay on
    the instance, but the pool summary sums the Prefills' alone."""
    targets = [TargetInfo("p0-dp0", "prefill", "p0", "10.0.0.1", 7100, "u"),
               TargetInfo("d0-dp0", "decode", "d0", "10.0.0.3", 7100, "u")]

    def readings(scale):
        return [TargetReading("p0-dp0", "prefill", "u", values=engine(1000 * scale, 0, ext=(1000 * scale, 200 * scale))),
                TargetReading("d0-dp0", "decode", "u", values=engine(0, 0, ext=(1000 * scale, 990 * scale)))]

    first = live_state(deployment_id=1, at=100.0, targets=targets, readings=readings(1), kv_bytes_per_token=None,
                       previous=None)
    second = live_state(deployment_id=1, at=110.0, targets=targets, readings=readings(2), kv_bytes_per_token=None,
                        previous=first)
    assert (second["instances"]["p0"]["role"], second["instances"]["d0"]["role"]) == ("prefill", "decode")
    assert second["instances"]["d0"]["connector_hit_tok_s"] == pytest.approx(99.0)
    assert second["pool"]["hit_tok_s"] == pytest.approx(20.0)  # p0's alone
