"""record_round: one insert per round of raw points (each instance, the proxy, the pool master, the pool summary)
from the live state of real readings: simulated engines behind a real pdproxy, a recorded mooncake_master page."""

from pathlib import Path

import pytest

from apps.telemetry.history import record_round, series
from apps.telemetry.live import TargetInfo, bucket_delta, histogram_quantile, live_state
from apps.telemetry.models import HistoryTier, MetricPoint
from apps.telemetry.scrape import fetch_text
from apps.telemetry.services import read_all
from tests.telemetry.telemetry_procs import MODEL, Cluster

MASTER_PAGE = (Path(__file__).resolve().parent / "fixtures" / "mooncake-master-busy.txt").read_text()
MASTER_URL = "http://127.0.10.80:1/metrics"  # never dialled: the recorded page answers for it


def fetch(url: str) -> str:
    return MASTER_PAGE if url == MASTER_URL else fetch_text(url)


@pytest.fixture(scope="module")
def engines():
    c = Cluster()
    try:
        p, d = c.engine("prefill", model=MODEL), c.engine("decode", model=MODEL)
        yield p, d, c.proxy([p], [d])
    finally:
        c.stop_all()


def targets_of(p, d, proxy) -> list[TargetInfo]:
    return [TargetInfo("p0-dp0", "prefill", "p0", "127.0.0.1", p.port, p.url + "/metrics"),
            TargetInfo("d0-dp0", "decode", "d0", "127.0.0.1", d.port, d.url + "/metrics"),
            TargetInfo("proxy", "proxy", "", "127.0.0.1", proxy.port, f"http://127.0.0.1:{proxy.port}/metrics"),
            TargetInfo("kv-pool", "kv_pool", "", "127.0.10.80", 1, MASTER_URL)]


def send(proxy, n: int, offset: int = 0):
    for i in range(n):
        status, _, _ = proxy.post("/v1/completions", {"model": MODEL, "prompt": f"request {offset + i} " * 12,
                                                      "max_tokens": 4})
        assert status == 200


def a_round(targets, at, previous=None):
    readings = read_all(targets, fetch=fetch)
    return readings, live_state(deployment_id=1, at=at, targets=targets, readings=readings,
                                kv_bytes_per_token=192_512, previous=previous)


@pytest.mark.procs
@pytest.mark.django_db
def test_two_rounds_of_real_readings_become_raw_points(engines, deployment, django_assert_num_queries):
    p, d, proxy = engines
    targets = targets_of(p, d, proxy)
    send(proxy, 2)
    first_readings, first = a_round(targets, 1_800_000_000.0)
    send(proxy, 3, offset=2)
    readings, second = a_round(targets, 1_800_000_005.0, previous=first)
    assert all(r.status == "ok" for r in readings), [r.reason for r in readings]

    with django_assert_num_queries(3):  # savepoint, the insert, its release
        record_round(deployment, first)
    with django_assert_num_queries(3):
        record_round(deployment, second)

    points = {(pt.subject, pt.at.timestamp()): pt.values for pt in MetricPoint.objects.filter(tier=HistoryTier.RAW)}
    assert {s for s, _ in points} == {"inst:p0", "inst:d0", "proxy", "kv-pool", "pool"}
    assert len(points) == 10
    p0, d0 = points[("inst:p0", 1_800_000_005.0)], points[("inst:d0", 1_800_000_005.0)]
    was = {r.key: r.values for r in first_readings}
    now = {r.key: r.values for r in readings}
    assert p0["prompt_tok_s"] == pytest.approx((now["p0-dp0"]["prompt_tokens"] - was["p0-dp0"]["prompt_tokens"]) / 5)
    assert p0["prompt_tok_s"] > 0 and d0["gen_tok_s"] == pytest.approx(3 * 4 / 5)  # 3 requests × 4 tokens
    window = bucket_delta(now["p0-dp0"]["ttft_buckets"], was["p0-dp0"]["ttft_buckets"])
    assert window["+Inf"] == 3
    assert p0["ttft_p50_s"] == pytest.approx(histogram_quantile(0.5, window)) and p0["ttft_p50_s"] > 0
    assert p0["ttft_p99_s"] >= p0["ttft_p50_s"]
    assert d0["itl_p50_s"] is not None and d0["itl_p99_s"] >= d0["itl_p50_s"]
    edge = second["edges"]["kv_transfer:inst:p0->inst:d0"]["kv_bytes_s"]
    assert edge > 0 and d0["kv_in_bytes_s"] == edge and p0["kv_out_bytes_s"] == edge
    assert p0["kv_in_bytes_s"] is None and d0["kv_out_bytes_s"] is None  # no edge into a Prefill, none out of a Decode
    assert set(p0) == {"kv_usage", "running", "waiting", "prompt_tok_s", "gen_tok_s", "ttft_s", "itl_s",
                       "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "kv_in_bytes_s", "kv_out_bytes_s",
                       "prefix_hit_rate", "connector_hit_rate"}
    px = points[("proxy", 1_800_000_005.0)]
    assert px["req_s"] == pytest.approx(3 / 5) and px["ttft_s"] > 0 and px["inflight"] == 0
    assert points[("proxy", 1_800_000_000.0)]["req_s"] is None  # the first round has no window
    pool = points[("kv-pool", 1_800_000_005.0)]
    assert (pool["key_count"], pool["allocated_bytes"], pool["total_bytes"]) == (1200, 1.5e9, 4e9)
    assert pool["lookup_s"] == 0  # the same recorded page twice: nothing happened in between
    assert set(points[("pool", 1_800_000_005.0)]) == {"hit_rate", "hit_tok_s"}


@pytest.mark.django_db
def test_an_unreachable_engine_keeps_a_point_of_nones_and_a_bad_state_never_raises(deployment, caplog):
    targets = [TargetInfo("p0-dp0", "prefill", "p0", "127.0.0.1", 9, "http://127.0.0.1:9/metrics")]
    _, state = a_round(targets, 1_800_000_000.0)
    record_round(deployment, state)
    out = series(deployment, "inst:p0", window_s=900, now=MetricPoint.objects.get(subject="inst:p0").at)
    assert out["at"] and all(column == [None] for column in out["series"].values())

    record_round(deployment, {"at": "not a time", "instances": {}})
    assert "was not kept" in caplog.text
    assert list(MetricPoint.objects.values_list("subject", flat=True)) == ["inst:p0"]  # no pool, no pool point


@pytest.mark.procs
@pytest.mark.django_db
def test_each_scrape_round_is_kept_and_served_by_the_api(engines, deployment, api_client_for):
    from apps.deployments.models import Process
    from apps.telemetry.services import deployment_scrape

    p, d, proxy = engines
    rows = [Process.objects.create(deployment=deployment, revision=deployment.active_revision, node_name="x",
                                   role=role, instance=instance, key=key, address=address, ports=ports, command="x",
                                   fingerprint="x", log_path="/l", pid_file="/p", state="running")
            for key, role, instance, address, ports in (
                ("p0-dp0", "prefill", "p0", "127.0.0.1", [p.port]), ("d0-dp0", "decode", "d0", "127.0.0.1", [d.port]),
                ("proxy", "proxy", "", "127.0.0.1", [proxy.port]), ("kv-pool", "kv_pool", "", "127.0.10.80", [2, 1]))]
    deployment_scrape(deployment, rows, fetch=fetch)
    send(proxy, 2, offset=100)
    deployment_scrape(deployment, rows, fetch=fetch)

    client = api_client_for("viewer")
    d0 = client.get(f"/api/deployments/{deployment.pk}/history/", {"subject": "inst:d0", "window": "15m"}).json()
    assert d0["tier"] == "raw" and len(d0["at"]) == 2
    assert d0["series"]["gen_tok_s"][0] is None and d0["series"]["gen_tok_s"][1] > 0
    assert d0["series"]["kv_in_bytes_s"][1] > 0 and d0["series"]["ttft_p99_s"][1] > 0
    pool = client.get(f"/api/deployments/{deployment.pk}/history/", {"subject": "kv-pool", "window": "1h"}).json()
    assert pool["series"]["key_count"] == [1200.0, 1200.0]
