"""Instances that span nodes in the topology read model (issue 11): the MindIE seed layout of the Ascend article,
4 Prefill instances of 2 servers each and 1 Decode instance of 8 servers, on 16-die A3 nodes. External DP puts one
process per global rank on its node; internal DP one process per node, the secondaries headless."""

import pytest

from apps.deployments.models import Process
from apps.telemetry.topology_snapshot import topology_snapshot
from tests.telemetry.mindie_layout import D_NODES, P_NODES, create_nodes, mindie_yaml

pytestmark = pytest.mark.django_db

@pytest.fixture
def mindie(cluster, credential, make_user):
    from apps.deployments.services import deployment_create

    create_nodes(cluster, credential)
    return deployment_create(name="mindie", cluster=cluster, user=make_user("operator", "owner"),
                             yaml_text=mindie_yaml())


def _by(items, key, value):
    return next(i for i in items if i[key] == value)


def test_the_snapshot_groups_the_nodes_by_the_instance_that_spans_them(mindie):
    snap = topology_snapshot(mindie)
    assert snap["problems"] == []

    insts = {i["name"]: i for i in snap["instances"]}
    assert [(n, insts[n]["nodes"]) for n in ("p0", "p3")] == [("p0", P_NODES[0:2]), ("p3", P_NODES[6:8])]
    assert insts["d0"]["nodes"] == D_NODES and insts["d0"]["node"] == "d-srv0"  # the first node: the DP master
    assert (insts["d0"]["dp"], insts["d0"]["dp_local"], insts["p0"]["dp_local"]) == (64, 8, 2)
    assert insts["d0"]["span_label"] == "TP2 × DP64 over 8 nodes"

    # Every node box says which instance spans it; the order keeps an instance's nodes together.
    nodes = {n["name"]: n for n in snap["nodes"]}
    assert all(nodes[n]["span"] == {"instance": "d0", "index": k, "of": 8} for k, n in enumerate(D_NODES))
    assert nodes["p-srv3"]["span"] == {"instance": "p1", "index": 1, "of": 2} and nodes["svc"]["span"] is None
    assert [n["name"] for n in snap["nodes"] if n["column"] == "decode"] == D_NODES
    assert [n["name"] for n in snap["nodes"] if n["column"] == "prefill"] == P_NODES
    assert nodes["p-srv3"]["instances"] == ["p1"] and nodes["d-srv5"]["instances"] == ["d0"]

    # External DP: one process per global rank, each on its node with its node-local API port and dies.
    d0 = insts["d0"]
    assert len(d0["ranks"]) == 64 and [r["dp_rank"] for r in d0["ranks"]] == list(range(64))
    r9 = _by(d0["ranks"], "dp_rank", 9)
    assert (r9["key"], r9["node"], r9["api_port"], r9["devices"], r9["headless"]) == (
        "d0-dp9", "d-srv1", 7101, [2, 3], False)
    assert [d["used_by"]["dp_rank"] for d in nodes["d-srv7"]["dies"]] == [r for r in range(56, 64) for _ in range(2)]
    assert all(d["used_by"]["instance"] == "p0" for d in nodes["p-srv1"]["dies"])

    # Per node of an instance: its slice (ranks, ports, dies), what a compact box draws.
    s1 = _by(d0["slices"], "node", "d-srv1")
    assert (s1["ranks"], s1["api_ports"], s1["devices"], s1["processes"]) == (
        [8, 15], list(range(7100, 7108)), list(range(16)), 8)
    assert s1["kv_port_window"] == [36200 + 8 * 2, 36200 + 16 * 2 - 1]

    # Internal DP: one process per node; the second is headless (no API server, no health URL, no port).
    p2 = insts["p2"]
    assert [(r["key"], r["node"], r["dp_rank"], r["headless"]) for r in p2["ranks"]] == [
        ("p2", "p-srv4", 0, False), ("p2", "p-srv4", 1, False), ("p2-n1", "p-srv5", 2, True),
        ("p2-n1", "p-srv5", 3, True)]
    head, second = _by(p2["slices"], "node", "p-srv4"), _by(p2["slices"], "node", "p-srv5")
    assert head["headless"] is False and head["api_ports"] == [7100]
    assert second["headless"] is True and second["api_ports"] == [] and second["keys"] == ["p2-n1"]
    assert _by(p2["ranks"], "dp_rank", 3)["health_url"] is None


def test_edges_attach_to_the_spanning_instance_and_the_pool_gets_one_edge_per_instance(mindie):
    snap = topology_snapshot(mindie)
    kv = sorted((e["source"], e["target"]) for e in snap["edges"] if e["kind"] == "kv_transfer")
    assert kv == [(f"inst:p{i}", "inst:d0") for i in range(4)]
    assert _by(snap["edges"], "id", "kv_transfer:inst:p0->inst:d0")["label"] == "KV 36000-36031 → 36200-36327"
    pool = [e for e in snap["edges"] if e["kind"] == "kv_pool"]
    assert sorted(e["source"] for e in pool) == ["inst:d0", "inst:p0", "inst:p1", "inst:p2", "inst:p3"]
    assert all(e["target"] == "proc:kv-pool" for e in pool) and "Mooncake" in pool[0]["label"]
    svc = _by(snap["services"], "key", "kv-pool")
    assert svc["backend"] == "mooncake" and svc["node"] == "svc"


def test_a_headless_process_row_shows_its_state_on_its_own_node(mindie):
    Process.objects.create(deployment=mindie, revision=mindie.active_revision, node_name="p-srv5", role="prefill",
                           instance="p2", key="p2-n1", address="127.0.12.6", command="x", fingerprint="x",
                           log_path="/l", pid_file="/p", state="failed", pid=77)
    snap = topology_snapshot(mindie)
    p2 = _by(snap["instances"], "name", "p2")
    assert p2["state"] == "failed"
    second = _by(p2["slices"], "node", "p-srv5")
    assert second["state"] == "failed" and _by(p2["slices"], "node", "p-srv4")["state"] is None


def test_the_live_rounds_of_the_layout_carry_pool_hits():
    """The rounds the browser test draws (mindie_layout.live_rounds) are live_state's own, with pool figures."""
    from tests.telemetry.mindie_layout import live_rounds

    state = live_rounds(1000.0)[-1]
    p1 = state["instances"]["p1"]
    assert p1["connector_hit_rate"] == pytest.approx((14000 + 1400) / 28000) and p1["connector_hit_tok_s"] > 0
    assert p1["store_blocks"]["mooncake"]["load_s"] == pytest.approx(600 / 5)
    pool = state["services"]["kv-pool"]
    assert (pool["lookup_s"], pool["load_s"], pool["put_s"]) == pytest.approx((1600.0, 620.0, 300.0))
    assert state["pool"]["master"] == "kv-pool" and state["pool"]["hit_rate"] > 0.5
