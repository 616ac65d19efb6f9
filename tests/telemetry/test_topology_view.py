"""The topology picture's read model: nodes with their dies, instances per DP rank with live state, edges derived
from the plan, problems instead of a 500, a constant number of queries, and who may read it."""

import pytest
from django.test import Client

from apps.deployments.models import Deployment, Process
from apps.inventory.models import Node, Npu
from apps.telemetry.topology_snapshot import topology_snapshot

pytestmark = pytest.mark.django_db


def _npus(node: Node, *, bad: dict[int, str] | None = None, hbm_used: int = 16000) -> None:
    Npu.objects.bulk_create(
        Npu(node=node, npu_id=d // 2, chip_id=d % 2, logical_id=d, name="Ascend910", health=(bad or {}).get(d, "OK"),
            hbm_used_mb=hbm_used, hbm_total_mb=65536) for d in range(16))


def _process(deployment, key, *, role, instance="", node="node0", state="running", pid=4242):
    return Process.objects.create(deployment=deployment, revision=deployment.active_revision, node_name=node,
                                  role=role, instance=instance, key=key, address="127.0.10.230", command="x",
                                  fingerprint="x", log_path="/l", pid_file="/p", state=state, pid=pid)


def _by(items, key, value):
    return next(i for i in items if i[key] == value)


def test_snapshot_of_the_reference_topology(deployment):
    _npus(Node.objects.get(name="node2"))
    snap = topology_snapshot(deployment)

    assert snap["problems"] == [] and snap["profile"] == "vllm-ascend" and not snap["drawn_despite_problems"]
    assert snap["revision"]["number"] == 1
    nodes = {n["name"]: n for n in snap["nodes"]}
    assert set(nodes) == {"node0", "node1", "node2", "node3", "proxy"}
    assert {n: nodes[n]["column"] for n in nodes} == {
        "node0": "prefill", "node1": "prefill", "node2": "decode", "node3": "decode", "proxy": "front"}
    assert all(len(nodes[n]["dies"]) == 16 for n in ("node0", "node1", "node2", "node3"))
    assert nodes["proxy"]["dies"] == [] and set(nodes["proxy"]["processes"]) == {"proxy", "kv-pool"}
    assert nodes["node1"]["processes"] == ["p1-dp0"] and nodes["node1"]["span"] is None
    assert snap["client"] == {"id": "client", "node": "bench", "address": "127.0.10.235"}

    # Device assignment: p0 holds all 16 dies of node0; d0's four DP ranks hold 4 dies each.
    assert [d["used_by"]["instance"] for d in nodes["node0"]["dies"]] == ["p0"] * 16
    p0 = _by(snap["instances"], "name", "p0")
    assert [r["devices"] for r in p0["ranks"]] == [list(range(16))]
    assert p0["ranks"][0]["kv_port_window"] == [30000, 30015] and p0["ranks"][0]["api_port"] == 7100
    d0 = _by(snap["instances"], "name", "d0")
    assert d0["node"] == "node2" and (d0["tp"], d0["dp"]) == (4, 4)
    assert [r["devices"] for r in d0["ranks"]] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert [r["api_port"] for r in d0["ranks"]] == [7100, 7101, 7102, 7103]
    assert [r["kv_port_window"] for r in d0["ranks"]] == [[30200, 30203], [30204, 30207], [30208, 30211],
                                                          [30212, 30215]]
    assert d0["kv_port_window"] == [30200, 30215]
    assert [d["used_by"]["dp_rank"] for d in nodes["node2"]["dies"]] == [r for r in range(4) for _ in range(4)]

    # NPU rows: health and HBM per die; undiscovered nodes count as usable but say so.
    assert nodes["node2"]["dies"][0]["health"] == "OK" and nodes["node2"]["dies"][0]["ok"] is True
    assert nodes["node2"]["dies"][0]["hbm_percent"] == pytest.approx(24.4)
    assert nodes["node0"]["dies"][0]["discovered"] is False and nodes["node0"]["dies"][0]["ok"] is True

    # Edges: the request path, every P to every D (4 pairs at instance level), and every instance to the pool.
    edges = snap["edges"]
    kv = sorted((e["source"], e["target"]) for e in edges if e["kind"] == "kv_transfer")
    assert kv == [("inst:p0", "inst:d0"), ("inst:p0", "inst:d1"), ("inst:p1", "inst:d0"), ("inst:p1", "inst:d1")]
    assert _by(edges, "id", "kv_transfer:inst:p0->inst:d0")["label"] == "KV 30000-30015 → 30200-30215"
    requests = sorted((e["source"], e["target"]) for e in edges if e["kind"] == "request")
    assert requests == [("client", "proc:proxy"), ("proc:proxy", "inst:p0"), ("proc:proxy", "inst:p1")]
    assert not [e for e in edges if e["kind"] == "kv_backup"]  # the store is folded into the pool (issue 11)
    pool = {e["source"]: e for e in edges if e["kind"] == "kv_pool"}
    assert sorted(pool) == ["inst:d0", "inst:d1", "inst:p0", "inst:p1"]
    assert pool["inst:p0"]["label"] == "Mooncake master :50088 · load + put"
    assert pool["inst:d0"]["mode"] == "holds pool memory"  # consumer_is_to_load/put are off
    assert _by(snap["services"], "key", "kv-pool")["backend"] == "mooncake"
    ids = {i["id"] for i in snap["instances"]} | {s["id"] for s in snap["services"]} | {"client"}
    assert all(e["source"] in ids and e["target"] in ids for e in edges)


def test_live_state_comes_from_the_process_rows(deployment):
    _process(deployment, "p0-dp0", role="prefill", instance="p0", pid=1111)
    _process(deployment, "d0-dp0", role="decode", instance="d0", node="node2")
    _process(deployment, "d0-dp1", role="decode", instance="d0", node="node2", state="failed")
    _process(deployment, "proxy", role="proxy", node="proxy", state="stopped")
    _process(deployment, "old-instance-dp0", role="prefill", instance="old-instance", state="running")

    snap = topology_snapshot(deployment)

    p0 = _by(snap["instances"], "name", "p0")
    assert (p0["state"], p0["state_colour"], p0["ranks"][0]["pid"]) == ("running", "green", 1111)
    d0 = _by(snap["instances"], "name", "d0")
    assert d0["state"] == "failed" and d0["state_colour"] == "red"  # the worst of its ranks
    assert [r["state"] for r in d0["ranks"]] == ["running", "failed", None, None]
    assert d0["ranks"][2]["state_label"] == "not started"
    assert _by(snap["instances"], "name", "p1")["state"] is None
    proxy = _by(snap["services"], "key", "proxy")
    assert (proxy["state"], proxy["state_colour"]) == ("stopped", "grey")
    assert [s["key"] for s in snap["stray_processes"]] == ["old-instance-dp0"]


def test_a_die_gone_bad_is_a_problem_and_the_picture_still_shows_where_everything_runs(deployment):
    _npus(Node.objects.get(name="node2"), bad={5: "Alarm"})

    snap = topology_snapshot(deployment)

    assert [(p["instance"], p["field"]) for p in snap["problems"]] == [("d0", "dp")]
    assert snap["drawn_despite_problems"] is True
    die5 = next(n for n in snap["nodes"] if n["name"] == "node2")["dies"][5]
    assert die5["health"] == "Alarm" and die5["ok"] is False and die5["health_colour"] == "red"
    assert die5["used_by"]["instance"] == "d0" and die5["used_by"]["dp_rank"] == 1


def test_the_plan_is_remembered_until_the_inventory_or_another_deployment_changes(deployment, monkeypatch):
    from collections import OrderedDict

    from apps.deployments import revision_plan

    _npus(Node.objects.get(name="node2"))
    monkeypatch.setattr(revision_plan, "_plans", OrderedDict())
    planned = []
    real = revision_plan.deployment_plan
    monkeypatch.setattr(revision_plan, "deployment_plan", lambda *a, **kw: planned.append(1) or real(*a, **kw))

    first = topology_snapshot(deployment)
    assert topology_snapshot(deployment) == first and len(planned) == 1

    Npu.objects.filter(node__name="node2", logical_id=5).update(health="Alarm")  # update(): no timestamp moves
    snap = topology_snapshot(deployment)
    assert len(planned) == 2 and [(p["instance"], p["field"]) for p in snap["problems"]] == [("d0", "dp")]
    assert topology_snapshot(deployment)["problems"] and len(planned) == 3  # a plan that fails is never kept
    Npu.objects.filter(node__name="node2", logical_id=5).update(health="OK")
    assert topology_snapshot(deployment) == first and len(planned) == 3  # the inventory as first read: remembered

    # Another deployment on the cluster now holds the dies and ports this one plans: planned again, and told.
    other = Deployment.objects.create(name="other", cluster=deployment.cluster)
    Process.objects.create(deployment=other, node_name="node0", role="prefill", instance="p0", key="p0-dp0",
                           address="127.0.10.230", ports=[7100], command="ASCEND_RT_VISIBLE_DEVICES=0,1 x",
                           fingerprint="x", log_path="/l", pid_file="/p", state="running")
    assert topology_snapshot(deployment)["problems"] and len(planned) == 4


def test_an_invalid_revision_gives_problems_not_an_exception(deployment):
    Node.objects.filter(name="node3").delete()  # d1 and store-2 now name a node that is gone

    snap = topology_snapshot(deployment)

    assert snap["nodes"] == [] and snap["edges"] == []
    assert any(p["instance"] == "d1" and p["field"] == "node" for p in snap["problems"])


def test_invalid_revision_is_a_200_with_problems_on_the_page_endpoint_and_the_api(deployment, make_user,
                                                                                   api_client_for):
    Node.objects.filter(name="node3").delete()
    client = Client()
    client.force_login(make_user("viewer", "web-viewer"))
    page = client.get(f"/deployments/{deployment.pk}/topology.json")
    assert page.status_code == 200 and page.json()["problems"]
    api = api_client_for("viewer").get(f"/api/deployments/{deployment.pk}/topology/")
    assert api.status_code == 200 and api.json()["problems"] == page.json()["problems"]


def test_viewer_reads_the_topology_and_anonymous_cannot(deployment, make_user, api_client_for):
    anonymous = Client().get(f"/deployments/{deployment.pk}/topology.json")
    assert anonymous.status_code in (302, 403)
    assert "nodes" not in anonymous.content.decode()
    assert Client().get(f"/api/deployments/{deployment.pk}/topology/").status_code in (401, 403)
    assert api_client_for(None).get(f"/api/deployments/{deployment.pk}/topology/").status_code == 403

    client = Client()
    client.force_login(make_user("viewer", "web-viewer"))
    body = client.get(f"/deployments/{deployment.pk}/topology.json").json()
    assert len(body["nodes"]) == 5 and len(body["instances"]) == 4
    api = api_client_for("viewer").get(f"/api/deployments/{deployment.pk}/topology/")
    assert api.status_code == 200 and api.json()["edges"] == body["edges"]


def test_the_topology_keeps_its_paths_names_and_schema_entry_beside_the_deployment(deployment, api_client_for):
    """Telemetry serves it now; clients still find it where DeploymentViewSet's action used to be."""
    import yaml
    from django.urls import reverse

    assert reverse("telemetry:topology-json", args=[deployment.pk]) == f"/deployments/{deployment.pk}/topology.json"
    viewer = api_client_for("viewer")
    suffixed = viewer.get(f"/api/deployments/{deployment.pk}/topology.json")
    assert suffixed.status_code == 200 and len(suffixed.json()["instances"]) == 4
    missing = viewer.get("/api/deployments/999999/topology/")
    assert missing.status_code == 404 and "detail" in missing.json()
    schema = yaml.safe_load(viewer.get("/api/schema/").content)
    operation = schema["paths"]["/api/deployments/{id}/topology/"]["get"]
    assert operation["operationId"] == "deployments_topology_retrieve" and operation["tags"] == ["deployments"]
    assert [p["name"] for p in operation["parameters"]] == ["id"]
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Topology"}


SMALL = """launch_profile: sim
run_dir: /var/lib/pdcp/small
model:
  path: /models/m
  served_name: m
  profile: {layers: 2, kv_heads: 1, head_dim: 8, dtype: bfloat16, attention_heads: 16}
instances:
  - {name: p0, role: prefill, node: node0, tp: 16, api_port: 7100, kv_port: 30000}
  - {name: d0, role: decode, node: node2, tp: 16, api_port: 7100, kv_port: 30200}
proxy: {node: proxy, port: 1999}
"""


def _large_yaml() -> str:
    """Eight P and eight D nodes (DP4 each on D), a MemCache pool played by three memcached: many more rows than
    SMALL."""
    lines = [line for line in SMALL.splitlines() if not line.startswith("  - ")]
    at = lines.index("instances:") + 1
    instances = [f"  - {{name: p{i}, role: prefill, node: big{i}, tp: 16, api_port: 7100, kv_port: 30000}}"
                 for i in range(8)]
    instances += [f"  - {{name: d{i}, role: decode, node: big{8 + i}, tp: 4, dp: 4, dp_rpc_port: 12321, "
                  "api_port: 7100, kv_port: 30200}" for i in range(8)]
    extra = ["kv_pool: {backend: memcache, node: proxy, install_path: /opt/mmc}", "store:", "  servers:",
             *(f"    - {{node: big{i}, port: 11211}}" for i in range(3))]
    text = "\n".join(lines[:at] + instances + lines[at:] + extra) + "\n"
    return text.replace("tp: 16, api_port", "tp: 16, dp: 1, api_port").replace("/small", "/large")


def test_query_count_is_constant_for_a_small_and_a_large_deployment(ref_cluster, credential,
                                                                     django_assert_num_queries):
    from apps.deployments.services import deployment_create

    small = deployment_create(name="small", cluster=ref_cluster, user=None, yaml_text=SMALL)
    for i in range(16):
        node = Node.objects.create(cluster=ref_cluster, name=f"big{i}", address=f"127.0.11.{i + 1}",
                                   credential=credential, npu_count=16, hardware_model="Atlas 800I A3")
        _npus(node)
    large = deployment_create(name="large", cluster=ref_cluster, user=None,  # small holds the proxy's 1999-2000
                              yaml_text=_large_yaml().replace("port: 1999", "port: 2999"))
    for key in ("p0", "d0"):
        _process(small, key, role="prefill" if key == "p0" else "decode", instance=key)
    for i in range(8):
        _process(large, f"p{i}", role="prefill", instance=f"p{i}", node=f"big{i}")
        for r in range(4):
            _process(large, f"d{i}-dp{r}", role="decode", instance=f"d{i}", node=f"big{8 + i}")

    small, large = Deployment.objects.select_related("cluster").filter(pk__in=(small.pk, large.pk)).order_by("-name")
    # active revision, jobs, nodes + dies, the plan's inputs (other deployments' active revisions and processes),
    # the plan (inventory facts twice, the others' revisions and processes), processes
    with django_assert_num_queries(13):
        small_snap = topology_snapshot(small)
    with django_assert_num_queries(13):
        large_snap = topology_snapshot(large)
    # Read again with nothing changed: the plan is remembered, only its inputs are read.
    for snap, dep in ((small_snap, small), (large_snap, large)):
        with django_assert_num_queries(7):
            assert topology_snapshot(dep) == snap

    assert not small_snap["problems"] and not large_snap["problems"]
    assert len(large_snap["nodes"]) == 17 and len(large_snap["instances"]) == 16
    assert len([e for e in large_snap["edges"] if e["kind"] == "kv_transfer"]) == 64
    # The memcached ring that plays MemCache is one pool: one edge per instance to the group, not to each server.
    pool = [e for e in large_snap["edges"] if e["kind"] == "kv_pool"]
    assert len(pool) == 16 and {e["target"] for e in pool} == {"group:store"}
    assert [s["backend"] for s in large_snap["services"] if s["role"] == "store"] == ["memcached"] * 3


# --- live state (apps.telemetry's last scrape round, from Redis) ---------------------------------------------------

ENGINE_TEXT = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
vllm:num_requests_waiting{{engine="0",model_name="m"}} 2
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} 0.375
vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt}
vllm:generation_tokens_total{{engine="0",model_name="m"}} 0
"""
PROXY_TEXT = """pdproxy_edge_requests_total{{decode="127.0.10.232:7100",prefill="127.0.10.230:7100"}} {requests}
pdproxy_edge_prompt_tokens_total{{decode="127.0.10.232:7100",prefill="127.0.10.230:7100"}} {tokens}
pdproxy_backend_inflight{{backend="127.0.10.230:7100",role="prefill"}} 1
"""


def test_snapshot_carries_the_live_state_of_the_last_scrape(deployment, own_cache_prefix):
    from apps.telemetry.services import deployment_scrape

    assert topology_snapshot(deployment)["live"] is None  # nothing scraped yet
    rows = [Process.objects.create(deployment=deployment, revision=deployment.active_revision, node_name=n,
                                   role=role, instance=inst, key=key, address=addr, ports=[port], command="x",
                                   fingerprint="x", log_path="/l", pid_file="/p", state="running")
            for key, role, inst, n, addr, port in (("p0-dp0", "prefill", "p0", "node0", "127.0.10.230", 7100),
                                                   ("d0-dp0", "decode", "d0", "node2", "127.0.10.232", 7100),
                                                   ("proxy", "proxy", "", "proxy", "127.0.10.234", 8000))]
    counters = {"running": 3, "prompt": 1000, "requests": 10, "tokens": 1000}

    def fetch(url):
        if ":8000/" in url:
            return PROXY_TEXT.format(**counters)
        return ENGINE_TEXT.format(**counters)

    clock = iter([100.0, 110.0])
    deployment_scrape(deployment, rows, fetch=fetch, now=lambda: next(clock))
    counters.update(prompt=6000, requests=60, tokens=6000)
    deployment_scrape(deployment, rows, fetch=fetch, now=lambda: next(clock))

    live = topology_snapshot(deployment)["live"]
    p0 = live["instances"]["p0"]
    assert (p0["running"], p0["waiting"], p0["kv_usage"], p0["prompt_tok_s"]) == (3, 2, 0.375, 500.0)
    edge = live["edges"]["kv_transfer:inst:p0->inst:d0"]
    # qwen3-235b profile of the reference spec: 2 x 94 layers x 4 KV heads x 128 x 2 bytes = 192,512 B/token
    assert edge["req_s"] == 5.0 and edge["prompt_tok_s"] == 500.0 and edge["kv_bytes_s"] == 500.0 * 192_512
    assert edge["source"] == "proxy" and live["kv_bytes_per_token"] == 192_512
    assert live["stale"] is True  # the fake clock is far in the past: shown, but marked stale
    assert live["history"]["instances"]["p0"]["running"] == [3, 3]


def test_a_large_mesh_is_served_as_a_round_pushes_it_with_one_sparkline_series_each():
    from django.core.cache import cache

    from apps.telemetry.live import history_point
    from apps.telemetry.selectors import (
        HISTORY_LEN,
        history_entry,
        history_key,
        live_key,
        live_view,
        push_view,
    )
    from apps.telemetry.services import stored_state
    from apps.telemetry.topology_snapshot import live_section
    from tests.telemetry.test_live_payload import D, P, _size, _state

    state = stored_state(_state(100.0))
    history = [history_entry(history_point(_state(100.0 - 5 * k)), state["instances"])
               for k in reversed(range(HISTORY_LEN))]
    cache.set_many({live_key(77): state, history_key(77): history})

    served = live_section(77)
    push = push_view(state, history[-1])
    same = ("instances", "kv_fabric", "services", "pool", "health", "targets", "aggregated", "at")
    assert {k: served[k] for k in same} == {k: push[k] for k in same} and "history_point" not in served
    kv = [e for e in served["edges"] if e.startswith("kv_transfer:")]
    assert len(kv) == P * D // 32 and len(served["edges"]) == len(kv) + P  # busy pairs and the request legs
    assert set(served["edges"][kv[0]]) == {"requests", "req_s", "prompt_tok_s", "kv_bytes_s", "engine_kv_bytes_s",
                                           "source_label"}
    assert served["history"]["at"] == [h["at"] for h in history] and served["history"]["edges"] == {}
    assert served["history"]["instances"]["p1"] == {"prompt_tok_s": [1236.0] * HISTORY_LEN}  # 4 digits, as the page shows
    assert served["history"]["instances"]["d0"] == {"gen_tok_s": [98.77] * HISTORY_LEN}
    assert _size(served) * 2 < _size(live_view(state, history))
