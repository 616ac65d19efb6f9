"""End to end on real processes: a pdproxy in front of simulated 1P1D engines and a real mooncake_master, Process
rows pointing at them, two scrape rounds around N requests; the state lands in Redis and in the topology
snapshot, and the per-edge figures add up."""

import time
from pathlib import Path

import pytest

from apps.deployments.models import Process
from apps.telemetry.live import KV_SOURCE_PROXY
from apps.telemetry.scrape import OK
from apps.telemetry.services import scrape_running_deployments
from apps.telemetry.topology_snapshot import topology_snapshot
from tests.telemetry.telemetry_procs import MODEL, Cluster, start_mooncake_master

pytestmark = [pytest.mark.procs, pytest.mark.django_db, pytest.mark.timeout(30)]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
N = 20


@pytest.fixture
def deployment(cluster, credential, make_user):
    """The reference topology (qwen3-235b profile: 192,512 KV bytes per token) on an inventory of six nodes."""
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Node
    from tests.keys import TEST_HOST_KEY

    for i, (name, npus) in enumerate((("node0", 16), ("node1", 16), ("node2", 16), ("node3", 16), ("proxy", 0),
                                      ("bench", 0))):
        Node.objects.create(cluster=cluster, name=name, address=f"127.0.10.{241 + i}", credential=credential,
                            host_key=TEST_HOST_KEY, npu_count=npus)
    return deployment_create(name="live", cluster=cluster, user=make_user("operator", "owner"),
                             yaml_text=(EXAMPLES / "reference-topology-fixed.yaml").read_text())


@pytest.fixture
def procs():
    c = Cluster()
    try:
        yield c
    finally:
        c.stop_all()


def _row(deployment, key, role, instance, address, ports, state="running"):
    return Process.objects.create(deployment=deployment, revision=deployment.active_revision, node_name="x",
                                  role=role, instance=instance, key=key, address=address, ports=ports,
                                  command="x", fingerprint="x", log_path="/l", pid_file="/p", state=state)


def test_two_rounds_around_n_requests(deployment, procs):
    p, d = procs.engine("prefill", model=MODEL), procs.engine("decode", model=MODEL)
    proxy = procs.proxy([p], [d])
    pool_url = start_mooncake_master(procs)
    pool_host, pool_port = pool_url.split("//")[1].split("/")[0].split(":")
    _row(deployment, "p0-dp0", "prefill", "p0", "127.0.0.1", [p.port])
    _row(deployment, "d0-dp0", "decode", "d0", "127.0.0.1", [d.port])
    _row(deployment, "proxy", "proxy", "", "127.0.0.1", [proxy.port])
    _row(deployment, "kv-pool", "kv_pool", "", pool_host, [50088, int(pool_port)])
    _row(deployment, "d1-dp0", "decode", "d1", "127.0.0.1", [1], state="stopped")  # not scraped

    first = scrape_running_deployments()[deployment.pk]
    assert {t["key"]: t["status"] for t in first["targets"]} == {
        "p0-dp0": OK, "d0-dp0": OK, "proxy": OK, "kv-pool": OK}
    for i in range(N):
        status, _, _ = proxy.post("/v1/completions", {"model": MODEL, "prompt": f"request {i}: " + "tok " * 40,
                                                      "max_tokens": 4})
        assert status == 200
    time.sleep(0.2)
    second = scrape_running_deployments()[deployment.pk]

    edge = second["edges"]["kv_transfer:inst:p0->inst:d0"]
    assert edge["requests"] == N
    assert edge["req_s"] == pytest.approx(N / second["interval_s"])
    assert edge["kv_bytes_s"] > 0 and edge["source"] == KV_SOURCE_PROXY
    assert edge["kv_bytes_s"] == pytest.approx(edge["prompt_tok_s"] * 192_512)
    # The simulated engines' own transfer counters agree with tokens x profile.
    assert edge["engine_kv_bytes_s"] == pytest.approx(edge["kv_bytes_s"], rel=0.05)
    assert second["instances"]["d0"]["gen_tok_s"] == pytest.approx(N * 4 / second["interval_s"])
    assert second["instances"]["d0"]["ttft_s"] is not None and second["services"]["kv-pool"]["key_count"] == 0
    assert second["services"]["proxy"]["req_s"] == pytest.approx(N / second["interval_s"])
    assert max(t["scrape_ms"] for t in second["targets"]) < 1000

    # The topology read model carries the same round, with its sparkline history.
    live = topology_snapshot(deployment)["live"]
    assert live["edges"]["kv_transfer:inst:p0->inst:d0"]["kv_bytes_s"] == edge["kv_bytes_s"]
    assert live["instances"]["p0"]["status"] == OK and not live["stale"]
    assert live["history"]["edges"]["kv_transfer:inst:p0->inst:d0"] == [None, edge["kv_bytes_s"]]
    assert len(live["history"]["at"]) == 2
