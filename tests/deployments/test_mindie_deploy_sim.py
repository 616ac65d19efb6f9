"""Issue 15's finish line for MindIE on the simulated cluster (127.0.10.75-.81): the Ascend article's layout scaled
to six A3 nodes (examples/mindie/article-sim.yaml: 4 Prefill and 1 Decode instance, moe_ep) deploys through the
deploy host's deploy_ac_job.py, reports ready from the coordinator's log, serves a completion through MindIE's
coordinator, and stop (delete.sh) leaves no pod. A deploy whose pods cannot all be placed fails at the ready wait,
names the pods left pending, and takes down what it submitted."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.deployments.simdeploy import import_inventory, new_run_dir, run_job_now, running_spec

pytestmark = [pytest.mark.procs,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(300), pytest.mark.usefixtures("no_celery")]
FIRST = 75  # node0-node5 .75-.80, ms .81 (docs/contracts.md §2)
REPO = Path(__file__).resolve().parents[2]
COORDINATOR = f"http://127.0.10.{FIRST + 6}:1025"


def cluster_spec() -> dict:
    nodes = [{"name": f"node{i}", "address": f"127.0.10.{FIRST + i}", "ssh_port": 22, "hardware": "A3",
              "role": "prefill" if i < 4 else "decode", "labels": {}} for i in range(6)]
    nodes.append({"name": "ms", "address": f"127.0.10.{FIRST + 6}", "ssh_port": 22, "hardware": "", "role": "proxy",
                  "labels": {}})
    return {"name": "reference", "description": "MindIE article layout, scaled", "nodes": nodes, "services": {}}


@pytest.fixture(scope="module")
def sim():
    with running_spec(cluster_spec(), "pdcp-mindie-sim-") as state:
        yield state


@pytest.fixture
def inventory(sim, transactional_db):
    return import_inventory(sim)


@pytest.fixture
def run_dir():
    path = new_run_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def topology(run_dir: str, edit=None) -> str:
    data = yaml.safe_load((REPO / "examples" / "mindie" / "article-sim.yaml").read_text())
    data["run_dir"] = run_dir
    data["mindie"]["ready_timeout_s"] = 120
    if edit:
        edit(data)
    return yaml.safe_dump(data, sort_keys=False)


def kill_pod(sim: dict, name: str) -> None:
    """What a reboot does to a pod: its process dies; Kubernetes' record of it stays (simcluster/mindie/kube.py)."""
    import os
    import signal

    state = Path(sim["nodes"]["node0"]["dir"]).parents[1]
    pods = json.loads((state / "kube" / "mindie" / "pods.json").read_text())["pods"]
    os.kill(next(p["pid"] for p in pods if p["name"] == name), signal.SIGKILL)


def chat(prompt: str, *, stream: bool = False) -> str:
    body = {"model": "ds_r1", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8, "stream": stream}
    request = urllib.request.Request(f"{COORDINATOR}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read().decode()


def test_article_layout_deploys_through_deploy_ac_job_serves_through_the_coordinator_and_stops(
        sim, inventory, make_user, run_dir, client):
    from apps.deployments.models import Process
    from apps.deployments.services import (
        deployment_create,
        deployment_deploy,
        deployment_preflight,
        deployment_refresh,
        deployment_restart,
        deployment_stop,
    )

    operator = make_user("operator", "op")
    deployment = deployment_create(name="article", cluster=inventory, user=operator, yaml_text=topology(run_dir))
    client.force_login(operator)
    page = client.get(f"/deployments/{deployment.pk}/plan/").content.decode()
    assert "python3 deploy_ac_job.py --user_config_path" in page and "&quot;p_instances_num&quot;: 4" in page
    assert page.count("<tr><td>p") == 4 and "Deploy this plan" in page
    checked = run_job_now(deployment_preflight, deployment, operator)
    assert checked.status == "successful", checked.explanation
    assert "MindIE's deploy scripts in /var/lib/pdcp-sim/mindie/kubernetes_deploy_scripts" in checked.explanation
    job = run_job_now(deployment_deploy, deployment, operator)
    assert job.status == "successful", job.explanation
    assert "through MindIE on ms" in job.explanation and "4 prefill and 2 decode pods" in job.explanation
    written = json.loads(Path(run_dir, "user_config.json").read_text())
    assert written["deploy_config"]["p_instances_num"] == 4 and written["deploy_config"]["d_instances_num"] == 1
    assert written["mindie_server_prefill_config"]["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0][
        "moe_ep"] == 4
    events = " ".join(job.events.values_list("text", flat=True))
    assert "pod mindie-server-4-master-0 (app=mindie-ms-server) on node4" in events  # deploy_ac_job.py's own output
    assert "coordinator: " in events and "MindIE-MS coordinator is ready!!!" in events

    rows = {p.key: p for p in Process.objects.filter(deployment=deployment)}
    assert {k for k, p in rows.items() if p.state == "running"} == {
        "p0-pod0", "p1-pod0", "p2-pod0", "p3-pod0", "d0-pod0", "d0-pod1", "coordinator"}
    assert [rows[f"p{i}-pod0"].node_name for i in range(4)] == ["node0", "node1", "node2", "node3"]
    assert {rows["d0-pod0"].node_name, rows["d0-pod1"].node_name} == {"node4", "node5"}

    answer = json.loads(chat("What does the coordinator do?"))
    assert answer["choices"][0]["message"]["content"] and answer["usage"]["completion_tokens"] > 0
    streamed = chat("And streaming?", stream=True)
    assert streamed.strip().endswith("data: [DONE]")

    # Telemetry reads what MindIE exposes: every server pod's /metrics, and the coordinator's on its manage port.
    from apps.telemetry.services import deployment_scrape
    from apps.telemetry.topology_snapshot import topology_snapshot

    live = deployment_scrape(deployment, list(Process.objects.filter(deployment=deployment, state="running")))
    targets = {t["key"]: t for t in live["targets"]}
    assert {k: t["status"] for k, t in targets.items()} == {k: "ok" for k in rows}, targets
    assert targets["coordinator"]["url"] == f"{COORDINATOR.replace('1025', '1026')}/metrics"
    assert targets["coordinator"]["values"]["requests"] >= 3  # the probe and the two chats
    from apps.deployments.logs import process_log_tail

    coordinator_log = process_log_tail(rows["coordinator"])  # kubectl logs on the deploy host
    assert rows["coordinator"].log_path == "kubectl:ms/mindie/mindie-coordinator-master-0"
    assert "MindIE-MS coordinator is ready!!!" in coordinator_log
    page = client.get(f"/deployments/processes/{rows['d0-pod1'].pk}/log/").content.decode()
    assert "mindie-server-" in page or "INFO" in page, page[:2000]
    picture = topology_snapshot(deployment)
    d0 = next(i for i in picture["instances"] if i["name"] == "d0")
    assert "EP32" in d0["span_label"] and d0["ep"] == 32
    assert not any(r["headless"] for r in d0["ranks"]) and {r["api_port"] for r in d0["ranks"]} == {1025}

    read = run_job_now(deployment_refresh, deployment, operator)
    assert read.status == "successful" and "7 running" in read.explanation, read.explanation
    again = run_job_now(deployment_deploy, deployment, operator)
    assert again.status == "successful" and "already runs through MindIE" in again.explanation, again.explanation

    kill_pod(sim, "mindie-server-4-worker-0")  # d0's second pod dies (a node rebooted): the deploy replaces it all
    replaced = run_job_now(deployment_deploy, deployment, operator)
    assert replaced.status == "successful", replaced.explanation
    assert "taking it down first" in " ".join(replaced.events.values_list("text", flat=True))
    assert json.loads(chat("Back?"))["choices"][0]["message"]["content"]
    refused = run_job_now(deployment_restart, deployment, operator, instance="p0")
    assert refused.status == "failed" and "MindIE's controller restarts its own servers" in refused.explanation

    stopped = run_job_now(deployment_stop, deployment, operator)
    assert stopped.status == "successful", stopped.explanation
    assert set(Process.objects.filter(deployment=deployment).values_list("state", flat=True)) == {"stopped"}
    with pytest.raises(OSError):
        chat("anyone there?")
    assert not Path(run_dir, "user_config.json").exists()
    read = run_job_now(deployment_refresh, deployment, operator)
    assert read.status == "successful" and "7 stopped" in read.explanation, read.explanation


@pytest.fixture
def node5_busy(sim):
    """Another workload holds node5's 16 dies (an engine registration of a live process: this test's own), so
    Kubernetes has nowhere to put the second Decode pod."""
    import os

    from simcluster import nodestate

    path = nodestate.register_engine(Path(sim["nodes"]["node5"]["dir"]),
                                     {"pid": os.getpid(), "devices": list(range(16)), "role": "other-team"})
    yield
    path.unlink()


def test_pods_that_cannot_be_placed_fail_the_deploy_and_it_takes_down_what_it_submitted(
        inventory, make_user, run_dir, node5_busy):
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create, deployment_deploy

    def quick(data):
        data["mindie"]["ready_timeout_s"] = 15

    operator = make_user("operator", "op")
    deployment = deployment_create(name="too-big", cluster=inventory, user=operator,
                                   yaml_text=topology(run_dir, quick))
    job = run_job_now(deployment_deploy, deployment, operator)
    assert job.status == "failed"
    assert "step 'wait ready' timed out" in job.explanation
    assert "pods not running: mindie-server" in job.explanation
    events = " ".join(job.events.values_list("text", flat=True))
    assert "bash delete.sh mindie" in events  # the cleanup undeployed
    assert set(Process.objects.filter(deployment=deployment).values_list("state", flat=True)) == {"stopped"}
    with pytest.raises(OSError):
        chat("anyone there?")


@pytest.fixture
def writable_scripts():
    """A copy of the published scripts that an admin allowlisted, in a directory anyone may write (mode 0777): what
    the host check is for, whatever the allowlist says."""
    import uuid

    top = Path("/var/lib") / f"pdcp-open-{uuid.uuid4().hex[:8]}"
    shutil.copytree("/var/lib/pdcp-sim/mindie/kubernetes_deploy_scripts", top / "scripts")
    top.chmod(0o755)
    (top / "scripts").chmod(0o777)
    yield top / "scripts"
    shutil.rmtree(top)


def test_a_scripts_directory_others_may_write_is_refused_on_the_host_before_it_runs(
        inventory, make_user, run_dir, writable_scripts):
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_preflight

    inventory.allowlist = {**inventory.allowlist, "mindie_scripts": [str(writable_scripts)]}
    inventory.save()

    def there(data):
        data["mindie"]["scripts_dir"] = str(writable_scripts)

    operator = make_user("operator", "op")
    deployment = deployment_create(name="open", cluster=inventory, user=operator, yaml_text=topology(run_dir, there))
    checked = run_job_now(deployment_preflight, deployment, operator)
    assert checked.status == "failed"
    assert f"refusing {writable_scripts}: it is writable by group or others (mode 777)" in checked.explanation
    job = run_job_now(deployment_deploy, deployment, operator)
    assert job.status == "failed"
    assert f"refusing {writable_scripts}: it is writable by group or others" in job.explanation, job.explanation
    events = " ".join(job.events.values_list("text", flat=True))
    assert "pod mindie-server" not in events  # deploy_ac_job.py never ran
    from apps.deployments.models import Process

    assert not Process.objects.filter(deployment=deployment, state="running").exists()
