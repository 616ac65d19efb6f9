"""The KV pool's box (issue 12 item 5) from real mooncake_master pages (tests/telemetry/fixtures/): what the pool holds
(keys, bytes used of the capacity its segments lend, the segments by host), or why it has nothing to show."""

from pathlib import Path

import pytest

from apps.telemetry.live import TargetInfo, live_state
from apps.telemetry.scrape import OK, read_target

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def master(body: str) -> dict:
    reading = read_target("kv-pool", "kv_pool", "http://127.0.0.1:1/metrics", fetch=lambda url: body)
    assert reading.status == OK, reading.reason
    return reading.values


def page(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_the_deployed_reference_topology_shows_its_keys_bytes_and_the_segments_of_every_engine():
    v = master(page("mooncake-master-sim-deployed.txt"))
    assert (v["key_count"], v["allocated_bytes"], v["total_bytes"], v["active_clients"]) == (4, 96256, 671088640, 10)
    # p0 on node0 (.60), p1 on node1 (.61), d0 and d1 four external DP ranks each on node2 (.62) and node3 (.63).
    assert v["segments"] == 10
    assert {h: s["segments"] for h, s in v["segment_hosts"].items()} == {
        "127.0.10.60": 1, "127.0.10.61": 1, "127.0.10.62": 4, "127.0.10.63": 4}
    assert v["segment_hosts"]["127.0.10.60"] == {"segments": 1, "allocated_bytes": 96256, "total_bytes": 64 << 20}
    assert sum(s["total_bytes"] for s in v["segment_hosts"].values()) == v["total_bytes"]
    assert v["empty_reason"] == ""


def test_a_master_nobody_mounted_a_segment_on_says_so():
    v = master(page("mooncake-master-no-segment.txt"))
    assert (v["key_count"], v["total_bytes"], v["segments"], v["segment_hosts"]) == (0, 0, 0, {})
    assert v["empty_reason"] == "no segment mounted: no engine's store client has joined this master"


def test_clients_connected_without_a_segment_are_counted():
    body = page("mooncake-master-no-segment.txt").replace("master_active_clients 0", "master_active_clients 2")
    assert master(body)["empty_reason"] == "no segment mounted: 2 store clients connected, none lends memory"


def test_an_older_master_leaving_zeros_out_still_shows_its_capacity():
    v = master(page("mooncake-master-omits-zeros.txt"))
    assert v["total_bytes"] == 4294967296 and v["empty_reason"] == ""
    assert v["segments"] is None  # it names no segment: the box counts its clients instead


@pytest.mark.parametrize("body", ["", "# HELP master_key_count Total number of keys\n# TYPE master_key_count gauge\n"])
def test_a_page_with_no_master_series_says_why_the_pool_is_empty(body):
    v = master(body)
    assert v["empty_reason"].startswith("no segment mounted: the page has no master_* series")


def test_the_live_state_carries_the_segments_to_the_picture():
    reading = read_target("kv-pool", "kv_pool", "u", fetch=lambda url: page("mooncake-master-sim-deployed.txt"))
    state = live_state(deployment_id=1, at=10.0, targets=[TargetInfo("kv-pool", "kv_pool", "", "h", 1, "u")],
                       readings=[reading], kv_bytes_per_token=None, previous=None)
    pool = state["services"]["kv-pool"]
    assert pool["segments"] == 10 and len(pool["segment_hosts"]) == 4 and pool["empty_reason"] == ""
    assert pool["used"] == pytest.approx(96256 / 671088640)
