"""The topology picture in a real browser: the reference deployment (built in the database, nothing deployed) is
drawn as node boxes with 16 die cells per A3 node and the P->D edges, and it is redrawn while a job runs; the MindIE
seed layout (instances over 2 and 8 nodes) is drawn as frames around their node boxes, with the pool's hits."""

from pathlib import Path

import pytest

from tests.e2e.pages import LIVE_KEPT_S, SHOWN_MS, logged_in_page

pytestmark = [pytest.mark.procs, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def reference_deployment():
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster, Node, Npu
    from apps.inventory.services import inventory_import

    viewer = get_user_model().objects.create_user("watcher", password="e2e-password-123")
    set_role(viewer, Role.VIEWER)
    inventory_import((EXAMPLES / "reference-cluster.yaml").read_text())
    cluster = Cluster.objects.get(name="reference")
    for i, node in enumerate(Node.objects.filter(cluster=cluster, npu_count=16).order_by("name")):
        Npu.objects.bulk_create(
            Npu(node=node, npu_id=d // 2, chip_id=d % 2, logical_id=d, name="Ascend910", health="OK",
                hbm_used_mb=8000 + 3000 * ((d + i) % 16), hbm_total_mb=65536) for d in range(16))
    deployment = deployment_create(name="reference", cluster=cluster, user=None,
                                   yaml_text=(EXAMPLES / "reference-topology-fixed.yaml").read_text())
    states = {"p0-dp0": "running", "p1-dp0": "running", "d0-dp0": "running", "d0-dp1": "running",
              "d0-dp2": "running", "d0-dp3": "running", "d1-dp0": "running", "d1-dp1": "failed",
              "d1-dp2": "running", "d1-dp3": "running", "proxy": "running", "kv-pool": "unknown"}
    for pid, (key, state) in enumerate(states.items(), start=31000):
        Process.objects.create(deployment=deployment, revision=deployment.active_revision, node_name="x",
                               role="store", key=key, address="127.0.10.1", command="x", fingerprint="x",
                               log_path="/l", pid_file="/p", state=state, pid=pid)
    return deployment


def open_as_watcher(browser, live_stack: str, pk: int):
    """The deployment page as the viewer `watcher`, with the page's script errors collected."""
    page, errors = logged_in_page(browser, live_stack)
    page.goto(f"{live_stack}/deployments/{pk}/")
    return page, errors


def test_the_detail_page_draws_the_reference_topology(live_stack, browser, reference_deployment, tmp_path):
    from playwright.sync_api import expect

    from apps.deployments.models import Process
    from apps.jobs.models import Job

    page, errors = open_as_watcher(browser, live_stack, reference_deployment.pk)

    svg = page.locator("#topology svg.topology-svg")
    expect(svg).to_be_visible(timeout=SHOWN_MS)
    nodes = page.locator("#topology .topo-node")
    assert sorted(nodes.evaluate_all("els => els.map(e => e.dataset.node)")) == [
        "node0", "node1", "node2", "node3", "proxy"]
    for name in ("node0", "node1", "node2", "node3"):
        expect(page.locator(f"#topology .topo-node[data-node={name}] .die")).to_have_count(16)
    used = page.locator("#topology .topo-node[data-node=node2] .die").evaluate_all(
        "els => els.map(e => e.dataset.usedBy)")
    assert used == [f"d0/dp{r}" for r in range(4) for _ in range(4)]
    kv = page.locator("#topology .edge[data-kind=kv_transfer]").evaluate_all(
        "els => els.map(e => e.dataset.source + '>' + e.dataset.target).sort()")
    assert kv == ["inst:p0>inst:d0", "inst:p0>inst:d1", "inst:p1>inst:d0", "inst:p1>inst:d1"]
    expect(page.locator("#topology .topo-instance[data-instance=d1]")).to_have_attribute("data-state", "failed")
    expect(page.locator("#topology .topo-service[data-key=kv-pool]")).to_have_attribute("data-state", "unknown")
    expect(page.locator("#topology .topo-frame")).to_have_count(0)  # no instance spans nodes here
    assert "pid: 31004" in page.locator("#topology .rank[data-key=d0-dp2] title").text_content()
    assert page.locator("#topology svg").bounding_box()["width"] <= 1400
    page.locator("#topology").screenshot(path=str(tmp_path / "topology.png"))

    # While a job of the deployment runs, the picture is re-read; a die going bad and a process failing show up.
    job = Job.objects.create(kind="restart", status="running", target_type="deployments.deployment",
                             target_id=reference_deployment.pk, target_label="reference")
    page.reload()
    expect(page.locator("#topology")).to_have_attribute("data-state", "watching", timeout=SHOWN_MS)
    from apps.inventory.models import Npu

    Npu.objects.filter(node__name="node3", logical_id=9).update(health="Alarm")
    Process.objects.filter(key="d1-dp1").update(state="running")
    Process.objects.filter(key="p0-dp0").update(state="failed")
    Job.objects.filter(pk=job.pk).update(status="successful")
    expect(page.locator("#topology")).to_have_attribute("data-state", "idle", timeout=SHOWN_MS)
    expect(page.locator("#topology .topo-instance[data-instance=p0]")).to_have_attribute("data-state", "failed")
    expect(page.locator("#topology .topo-node[data-node=node3] .die.bad")).to_have_count(1)
    expect(page.locator("#topology .topology-problems")).to_contain_text("d1")
    page.locator("#topology").screenshot(path=str(tmp_path / "topology-after-job.png"))
    assert errors == []


def _live_round(at: float, instances: dict) -> dict:
    return {"at": at, "interval_s": 5.0, "kv_bytes_per_token": None, "edges": {}, "services": {}, "targets": [],
            "instances": {name: {"status": "ok", "reason": "", "kv_usage": 0.4, "running": 3, "waiting": 0,
                                 "ttft_s": 0.2, "itl_s": 0.03, "reachable": 1, "processes": 1, **rates}
                          for name, rates in instances.items()}}


def test_instances_show_a_sparkline_of_their_token_rate(live_stack, browser, reference_deployment, tmp_path):
    """Decode draws generation tok/s from the server's history; one round is not a line."""
    import time

    from django.conf import settings
    from django.core.cache.backends.redis import RedisCache
    from playwright.sync_api import expect

    from apps.telemetry.live import history_point
    from apps.telemetry.selectors import history_key, live_key
    from tests.e2e.conftest import E2E_REDIS

    web_cache = RedisCache(E2E_REDIS, {"KEY_PREFIX": settings.PDCP_NAMESPACE})
    now = time.time()
    rounds = [_live_round(now - 5 * (7 - k), {"p0": {"prompt_tok_s": 900.0 + 100 * k, "gen_tok_s": 2.0},
                                               "d0": {"prompt_tok_s": 0.0, "gen_tok_s": 40.0 + 15 * k}})
              for k in range(8)]
    pk = reference_deployment.pk
    web_cache.set_many({live_key(pk): rounds[-1], history_key(pk): [history_point(r) for r in rounds]}, timeout=LIVE_KEPT_S)
    try:
        page, errors = open_as_watcher(browser, live_stack, pk)

        d0 = page.locator("#topology .live-instance[data-instance=d0] .sparkline path.spark-line")
        expect(d0).to_have_count(1, timeout=SHOWN_MS)
        assert d0.get_attribute("d").count("L") == 7  # eight rounds, eight points
        assert "generation tok/s" in page.locator(
            "#topology .live-instance[data-instance=d0] .sparkline title").text_content()
        # d1 has no live data at all: no line drawn for it
        expect(page.locator("#topology .live-instance[data-instance=d1] .sparkline")).to_have_count(0)
        page.locator("#topology").screenshot(path=str(tmp_path / "topology-sparklines.png"))
        assert errors == []
    finally:
        web_cache.delete_many([live_key(pk), history_key(pk)])


@pytest.fixture
def mindie_deployment(credential):
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster
    from tests.telemetry.mindie_layout import create_nodes, mindie_yaml

    viewer = get_user_model().objects.create_user("watcher", password="e2e-password-123")
    set_role(viewer, Role.VIEWER)
    cluster = Cluster.objects.create(name="ascend-article", description="MindIE seed layout")
    create_nodes(cluster, credential, npus=True)
    deployment = deployment_create(name="mindie", cluster=cluster, user=None, yaml_text=mindie_yaml())
    states = {"kv-pool": "running", "proxy": "running", "p3-n1": "failed", "d0-dp37": "unknown",
              **{f"p{i}-dp{r}": "running" for i in (0, 1) for r in range(4)}, "p2": "running", "p2-n1": "running",
              "p3": "running", **{f"d0-dp{r}": "running" for r in range(64) if r != 37}}
    for pid, (key, state) in enumerate(states.items(), start=41000):
        Process.objects.create(deployment=deployment, revision=deployment.active_revision, node_name="x",
                               role="store", key=key, address="127.0.12.1", command="x", fingerprint="x",
                               log_path="/l", pid_file="/p", state=state, pid=pid)
    return deployment


def test_the_mindie_layout_draws_instances_over_their_nodes_with_the_pool_hits(live_stack, browser, mindie_deployment):
    """4 Prefill instances of 2 servers and 1 Decode of 8 (the Ascend article's MindIE layout), live: each instance a
    frame around its node boxes, headless secondaries marked, the pool's hits under its box and on every instance."""
    import time

    from django.conf import settings
    from django.core.cache.backends.redis import RedisCache
    from playwright.sync_api import expect

    from apps.telemetry.live import history_point
    from apps.telemetry.selectors import history_key, live_key
    from tests.e2e.conftest import E2E_REDIS
    from tests.telemetry.mindie_layout import D_NODES, P_NODES, live_rounds

    web_cache = RedisCache(E2E_REDIS, {"KEY_PREFIX": settings.PDCP_NAMESPACE})
    rounds = live_rounds(time.time())
    pk = mindie_deployment.pk
    web_cache.set_many({live_key(pk): rounds[-1], history_key(pk): [history_point(r) for r in rounds]}, timeout=LIVE_KEPT_S)
    try:
        page, errors = open_as_watcher(browser, live_stack, pk)

        frames = page.locator("#topology .topo-frame")
        expect(frames).to_have_count(5, timeout=SHOWN_MS)
        assert frames.evaluate_all("els => els.map(e => e.dataset.instance)") == ["p0", "p1", "p2", "p3", "d0"]
        assert page.locator("#topology .topo-frame[data-instance=d0]").get_attribute("data-nodes") == " ".join(D_NODES)

        # Every node box lies inside the frame of the instance that spans it, and no two frames overlap.
        geometry = page.evaluate("""() => {
            const box = (el) => { const b = el.getBBox(); return [b.x, b.y, b.x + b.width, b.y + b.height]; };
            const out = {frames: {}, nodes: {}};
            for (const f of document.querySelectorAll('#topology .topo-frame')) out.frames[f.dataset.instance] =
                box(f.querySelector('rect.frame-box'));
            for (const n of document.querySelectorAll('#topology .topo-node')) out.nodes[n.dataset.node] =
                box(n.querySelector('rect.node-box'));
            return out;
        }""")
        spans = {f"p{i}": P_NODES[2 * i:2 * i + 2] for i in range(4)} | {"d0": D_NODES}
        for inst, names in spans.items():
            fx1, fy1, fx2, fy2 = geometry["frames"][inst]
            for name in names:
                x1, y1, x2, y2 = geometry["nodes"][name]
                assert fx1 <= x1 and fy1 <= y1 and x2 <= fx2 and y2 <= fy2, (inst, name)
        tops = sorted(geometry["frames"][f"p{i}"][1:4:2] for i in range(4))
        assert all(a[1] <= b[0] for a, b in zip(tops, tops[1:], strict=False))

        # 16 dies per node, each used by its rank; d-srv1 holds d0's ranks 8-15 on two dies each.
        expect(page.locator("#topology .topo-node[data-node=d-srv1] .die")).to_have_count(16)
        used = page.locator("#topology .topo-node[data-node=d-srv1] .die").evaluate_all(
            "els => els.map(e => e.dataset.usedBy)")
        assert used == [f"d0/dp{r}" for r in range(8, 16) for _ in range(2)]
        # A slice per node; d0's eight ranks per node in one summary row; internal DP's second node headless.
        expect(page.locator("#topology .topo-slice")).to_have_count(16)
        assert "d0-dp37" in page.locator("#topology .topo-slice[data-node=d-srv4] .rank-summary").get_attribute("data-keys")
        expect(page.locator("#topology .topo-slice[data-node=d-srv4]")).to_have_attribute("data-state", "unknown")
        headless = page.locator("#topology .topo-slice[data-headless='1']")
        assert headless.evaluate_all("els => els.map(e => e.dataset.node)") == ["p-srv5", "p-srv7"]
        expect(page.locator("#topology .topo-slice[data-node=p-srv7]")).to_have_attribute("data-state", "failed")
        expect(page.locator("#topology .topo-frame[data-instance=p3]")).to_have_attribute("data-state", "failed")
        assert "headless" in page.locator("#topology .rank[data-key=p2-n1]").first.text_content()

        # The pool: one edge from every instance; its hits under its box and on each instance's pool row.
        pool_edges = page.locator("#topology .edge[data-kind=kv_pool]").evaluate_all(
            "els => els.map(e => e.dataset.source).sort()")
        assert pool_edges == ["inst:d0", "inst:p0", "inst:p1", "inst:p2", "inst:p3"]
        service = page.locator("#topology .live-pool-service[data-key=kv-pool]")
        expect(service).to_contain_text("49000 keys")
        expect(service).to_contain_text("hits 56%")  # the Prefills: 78,400 of 140,000 tokens
        expect(service).to_contain_text("1.6k lookups/s · 620 loads/s · 300 puts/s")
        expect(page.locator("#topology .live-pool[data-instance=p1]")).to_contain_text("55% hit · 3.1k tok/s")
        expect(page.locator("#topology .live-pool[data-instance=p1]")).to_contain_text("120 in / 60 put blk/s")
        expect(page.locator("#topology .live-pool[data-instance=d0]")).to_contain_text("only lends it memory")
        expect(page.locator("#topology .live-instance[data-instance=d0]")).to_contain_text("run 120")

        assert page.locator("#topology svg").bounding_box()["width"] <= 1400
        page.locator("#topology").screenshot(path="/tmp/topology-mindie.png")
        page.screenshot(path="/tmp/topology-mindie-top.png")
        assert errors == []
    finally:
        web_cache.delete_many([live_key(pk), history_key(pk)])


def test_a_spanning_deployment_on_the_simulated_cluster_shows_its_pool_hits(live_stack, browser, sim, run_dir,
                                                                            monkeypatch):
    """Issue 11's finish line: deployed on the simulated cluster with the vllm-ascend rendering (p0 over node0 and
    node1, the second headless; d0 over node2 and node3; a Mooncake pool), requests that share a prefix, two real
    scrape rounds: the picture draws both instances over their nodes and the pool's hits."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.cache.backends.redis import RedisCache
    from playwright.sync_api import expect

    from apps.accounts.roles import Role, set_role
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import
    from apps.jobs import tasks
    from apps.jobs.runner import run_job
    from apps.telemetry.live import history_point
    from apps.telemetry.selectors import history_key, live_key
    from apps.telemetry.services import deployment_scrape
    from tests.deployments.simdeploy import topology_yaml
    from tests.e2e.conftest import E2E_REDIS
    from tests.telemetry.spanning_sim import share_a_prefix, spanning

    monkeypatch.setattr(tasks.run_job_task, "apply_async", lambda *a, **k: None)  # this test runs its jobs itself
    inventory_import(Path(sim["inventory"]).read_text(), allow_key_files=True)
    viewer = get_user_model().objects.create_user("watcher", password="e2e-password-123")
    set_role(viewer, Role.VIEWER)
    operator = get_user_model().objects.create_user("ops", password="e2e-password-123")
    set_role(operator, Role.OPERATOR)
    deployment = deployment_create(name="pool-sim", cluster=Cluster.objects.get(name="reference"), user=operator,
                                   yaml_text=topology_yaml(run_dir, edit=spanning))
    web_cache = RedisCache(E2E_REDIS, {"KEY_PREFIX": settings.PDCP_NAMESPACE})
    try:
        job = deployment_deploy(deployment=deployment, user=operator)
        run_job(job.pk)
        job.refresh_from_db()
        assert job.status == "successful", job.explanation

        def scrape():
            return deployment_scrape(deployment, list(Process.objects.filter(deployment=deployment, state="running")))

        rounds = [scrape()]
        rounds.append(share_a_prefix(deployment, scrape))
        assert rounds[-1]["pool"]["hit_rate_total"], rounds[-1]["pool"]
        web_cache.set_many({live_key(deployment.pk): rounds[-1],
                            history_key(deployment.pk): [history_point(r) for r in rounds]}, timeout=LIVE_KEPT_S)

        page, errors = open_as_watcher(browser, live_stack, deployment.pk)

        frames = page.locator("#topology .topo-frame")
        expect(frames).to_have_count(2, timeout=SHOWN_MS)
        assert frames.evaluate_all("els => els.map(e => e.dataset.nodes)") == ["node0 node1", "node2 node3"]
        expect(page.locator("#topology .topo-frame[data-instance=p0]")).to_have_attribute("data-state", "running")
        assert page.locator("#topology .topo-slice[data-headless='1']").evaluate_all(
            "els => els.map(e => e.dataset.node)") == ["node1"]
        expect(page.locator("#topology .live-pool[data-instance=p0]")).to_contain_text("% hit")
        service = page.locator("#topology .live-pool-service[data-key=kv-pool]")
        expect(service).to_contain_text("keys")
        expect(service).to_contain_text("hits ")
        expect(page.locator("#topology .live-pool[data-instance=d0]")).to_contain_text("pool: load (its connector")
        page.locator("#topology").screenshot(path="/tmp/topology-sim-pool.png")
        assert errors == []
    finally:
        web_cache.delete_many([live_key(deployment.pk), history_key(deployment.pk)])
        stopped = deployment_stop(deployment=deployment, user=operator)
        run_job(stopped.pk)
        stopped.refresh_from_db()
        assert stopped.status == "successful", stopped.explanation


def test_a_pushed_round_grows_the_sparkline_and_lights_its_edge(live_stack, browser, reference_deployment):
    """A round's push carries only its newest sparkline point and its busy P->D pairs (selectors.push_view): the
    page appends the point to the snapshot's series and draws the pair's flow; the pairs not sent are idle."""
    import re
    import threading
    import time

    from django.conf import settings
    from django.core.cache.backends.redis import RedisCache
    from playwright.sync_api import expect

    from apps.realtime.push import emit
    from apps.telemetry.live import history_point
    from apps.telemetry.selectors import history_key, live_key, push_view
    from tests.e2e.conftest import E2E_REDIS

    web_cache = RedisCache(E2E_REDIS, {"KEY_PREFIX": settings.PDCP_NAMESPACE})
    now = time.time()
    rounds = [_live_round(now - 5 * (3 - k), {"d0": {"prompt_tok_s": 0.0, "gen_tok_s": 40.0 + 15 * k}})
              for k in range(4)]
    pk = reference_deployment.pk
    web_cache.set_many({live_key(pk): rounds[-1], history_key(pk): [history_point(r) for r in rounds]}, timeout=LIVE_KEPT_S)
    try:
        page, errors = open_as_watcher(browser, live_stack, pk)
        d0 = page.locator("#topology .live-instance[data-instance=d0] .sparkline path.spark-line")
        expect(d0).to_have_count(1, timeout=SHOWN_MS)
        assert d0.get_attribute("d").count("L") == 3
        expect(page.locator("#topology")).to_have_attribute("data-ws", "open", timeout=SHOWN_MS)
        busy = {"requests": 42.0, "req_s": 2.5, "prompt_tok_s": 1280.0, "kv_bytes_s": 2.5e8, "engine_kv_bytes_s": None,
                "source_label": "proxy"}
        idle = {**busy, "req_s": 0.0, "prompt_tok_s": 0.0, "kv_bytes_s": 0.0}
        pushed = {**_live_round(now + 5, {"d0": {"prompt_tok_s": 0.0, "gen_tok_s": 120.0}}),
                  "edges": {"kv_transfer:inst:p0->inst:d0": busy, "kv_transfer:inst:p1->inst:d1": idle}}
        live = push_view(pushed, history_point(pushed))
        assert list(live["edges"]) == ["kv_transfer:inst:p0->inst:d0"] and "history" not in live
        sent = []  # playwright's sync API holds an event loop in this thread: the push goes from another one
        pusher = threading.Thread(target=lambda: sent.append(emit(f"deployment-{pk}", {"type": "live", "live": live})))
        pusher.start()
        pusher.join(10)
        assert sent == [True]
        expect(page.locator("#topology")).to_have_attribute("data-live-at", str(live["at"]), timeout=SHOWN_MS)
        assert d0.get_attribute("d").count("L") == 4  # five rounds now: the snapshot's four and the pushed one
        edge = page.locator("#topology .edge[data-kind=kv_transfer][data-source='inst:p0'][data-target='inst:d0']")
        expect(edge).to_have_class("edge kv busy")
        expect(page.locator("#topology .edge.kv.busy")).to_have_count(1)
        expect(page.locator("#topology .live-flow")).to_have_text(re.compile(r"^2.5 req/s · 250 MB/s.*42 hand-overs", re.S))
        assert errors == []
    finally:
        web_cache.delete_many([live_key(pk), history_key(pk)])
