"""The reference topology as containers (examples/reference-topology-containers.yaml, the sim profile) on a simulated
reference cluster (127.0.10.70-.74, .84) whose inventory allows the container example: preflight, deploy through the
simulated `docker` over SSH, the rows and the picture, refresh, an AISBench run through it, a rolling restart that
replaces one instance's containers, refresh after an engine's process is killed, and stop leaving no container on
any node. Then preflight's refusals: a node without the image, one holding another digest, one without docker, a
pinned digest no node holds, podman refusing a missing mount source (docker only warns)."""

from __future__ import annotations

import os
import signal

import pytest

from simcluster.spec import DEFAULT_IMAGE, SHARED_HOST_PATHS
from tests.deployments.containersim import (
    ENGINE_NODES,
    container_sim_spec,
    containers_topology,
    deployment_containers,
    inspect,
    node_changed,
    on_node,
    wait_for,
)
from tests.deployments.simdeploy import import_inventory, log_tails, run_job_now, start_spec, stop_cluster

pytestmark = [pytest.mark.procs,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(900), pytest.mark.usefixtures("no_celery")]

ENGINES = {"p0-dp0": "node0", "p1-dp0": "node1", **{f"d0-dp{r}": "node2" for r in range(4)},
           **{f"d1-dp{r}": "node3" for r in range(4)}}
OTHER_DIGEST = "sha256:" + "d" * 64


@pytest.fixture(scope="module")
def sim():
    state_dir, state = start_spec(container_sim_spec(), prefix="pdcp-container-sim-")
    try:
        yield state
    finally:
        stop_cluster(state_dir)


def _events(job) -> str:
    return "\n".join(f"{e.node} {e.stream} {e.text}" for e in job.events.order_by("counter"))


def _rows(deployment) -> dict:
    from apps.deployments.models import Process

    return {r.key: r for r in Process.objects.filter(deployment=deployment)}


def _evaluate(deployment, user):
    from apps.evals.models import EvalRun
    from apps.evals.services import eval_run_create
    from apps.jobs.runner import run_job

    run = eval_run_create(deployment=deployment, user=user,
                          settings={"dataset": "catalogue:made-up-aime", "max_out_len": 512, "concurrency": 4,
                                    "num_warmups": 0, "time_limit_s": 300, "mode": "accuracy"})
    run_job(run.job_id)
    return EvalRun.objects.get(pk=run.pk)


def _last_lines_line(deployment, keys: list[str]) -> str:
    """The shell line the health gate's progress report runs on a node for these engines (container runtime)."""
    from types import SimpleNamespace

    from apps.deployments.runtimes import RUNTIMES
    from apps.deployments.runtimes.health_gate import last_lines_command

    runtime = RUNTIMES["container"]
    run = SimpleNamespace(deployment=deployment, spec=SimpleNamespace(container=SimpleNamespace(engine="docker")))
    return last_lines_command([SimpleNamespace(key=k) for k in keys],
                              lambda p: runtime.tail_line(run, SimpleNamespace(key=p.key, role="decode"), 1))


def test_the_container_reference_deploys_serves_restarts_reads_and_stops_leaving_no_container(
        sim, transactional_db, make_user, run_dir, settings, tmp_path, monkeypatch):
    from apps.deployments.runtimes import health_gate
    from apps.deployments.runtimes.health_gate import parse_last_lines
    from apps.deployments.services import (
        deployment_create,
        deployment_deploy,
        deployment_preflight,
        deployment_refresh,
        deployment_restart,
        deployment_stop,
    )
    from apps.telemetry.topology_snapshot import topology_snapshot

    settings.PDCP_EVALS_DIR = tmp_path / "evals"
    monkeypatch.setattr(health_gate, "PROGRESS_EVERY_S", 1)  # a "starting (N s)" line within the engines' start-up
    cluster = import_inventory(sim)
    operator = make_user("operator", "op")

    def edit(data):
        data["simulation"] = {"answer_book": "made-up-aime", "accuracy": 0.7, "think": True}
        for inst in data["instances"]:
            inst["env"].update(SIMCLUSTER_STARTUP_S="3", SIMCLUSTER_TIME_SCALE="0.1")

    deployment = deployment_create(name="refc", cluster=cluster, user=operator,
                                   yaml_text=containers_topology(run_dir, edit=edit))
    job = run_job_now(deployment_preflight, deployment, operator)
    assert job.status == "successful", job.explanation
    assert "containers: docker, the image and its digest, device nodes, mounts" in job.explanation

    job = run_job_now(deployment_deploy, deployment, operator, params={"health_timeout": 120})
    try:
        assert job.status == "successful", (job.explanation, log_tails(run_dir))
        events = _events(job)
        # A stage still waiting reports each engine's last log line, read with `docker logs` through the runtime.
        # Whether a report falls after an engine's first line is timing (a loaded run once read them all before
        # any), so the line the reports run is checked here, once the engines have logged.
        assert any(" starting (" in line for line in events.splitlines()), events
        d0 = [k for k in ENGINES if k.startswith("d0")]
        status, out, err = on_node(sim, "node2", "sh", "-c", _last_lines_line(deployment, d0))
        last = parse_last_lines(out)
        assert status == 0 and all(last.get(k) for k in d0), (out, err)
        rows = _rows(deployment)
        assert set(rows) == {"kv-pool", "proxy", *ENGINES}
        assert {r.state for r in rows.values()} == {"running"}
        for key, node in ENGINES.items():
            c = inspect(sim, node, f"pdcp-refc-{key}")
            assert c["State"]["Status"] == "running" and rows[key].pid == c["State"]["Pid"], key
            assert c["Config"]["Labels"]["pdcp.revision"] == "1" and rows[key].command.startswith("docker rm ")
            assert f"{run_dir}/config:{run_dir}/config:ro" in c["HostConfig"]["Binds"], c["HostConfig"]["Binds"]
        assert "docker" not in rows["proxy"].command and "docker" not in rows["kv-pool"].command

        snap = topology_snapshot(deployment)
        assert {i["name"]: i["state"] for i in snap["instances"]} == {n: "running" for n in ("p0", "p1", "d0", "d1")}
        job = run_job_now(deployment_refresh, deployment, operator)
        assert job.status == "successful" and "12 running" in job.explanation, job.explanation

        run = _evaluate(deployment, operator)
        assert run.status == "succeeded", (run.explanation, "\n".join(run.log_tail))
        assert run.accuracy and run.accuracy > 0 and run.client_node == "bench"

        d0_before = {k: inspect(sim, "node2", f"pdcp-refc-{k}")["Id"] for k in ENGINES if k.startswith("d0")}
        p0_before = inspect(sim, "node0", "pdcp-refc-p0-dp0")["Id"]
        job = run_job_now(deployment_restart, deployment, operator, instance="d0", params={"health_timeout": 120})
        assert job.status == "successful", job.explanation
        rows = _rows(deployment)
        for key, old in d0_before.items():
            new = inspect(sim, "node2", f"pdcp-refc-{key}")
            assert new["Id"] != old and new["State"]["Status"] == "running" and rows[key].pid == new["State"]["Pid"]
        assert inspect(sim, "node0", "pdcp-refc-p0-dp0")["Id"] == p0_before
        assert len(deployment_containers(sim, "refc", "node2")) == 4  # replaced, not added

        os.kill(rows["p1-dp0"].pid, signal.SIGKILL)
        wait_for("p1-dp0's container to be exited after its process was killed",
                 lambda: inspect(sim, "node1", "pdcp-refc-p1-dp0")["State"]["Status"] == "exited", timeout=60)
        job = run_job_now(deployment_refresh, deployment, operator)
        assert job.status == "successful", job.explanation
        p1 = _rows(deployment)["p1-dp0"]
        assert p1.state == "failed" and "exited (exit code 137)" in p1.state_detail, (p1.state, p1.state_detail)
        assert next(i for i in topology_snapshot(deployment)["instances"] if i["name"] == "p1")["state"] == "failed"
    finally:
        stopped = run_job_now(deployment_stop, deployment, operator)
    assert stopped.status == "successful", stopped.explanation
    left = {node: list(deployment_containers(sim, "refc", node)) for node in ENGINE_NODES}
    assert left == {node: [] for node in ENGINE_NODES}, left
    assert {r.state for r in _rows(deployment).values()} == {"stopped"}


def _preflight(sim, make_user, run_dir, name, edit=None):
    from apps.deployments.models import Deployment
    from apps.deployments.services import deployment_create, deployment_preflight
    from apps.inventory.models import Cluster

    Deployment.objects.all().delete()  # a deployment never deployed; its dies and ports free for the next one
    cluster = Cluster.objects.filter(name="reference").first() or import_inventory(sim)
    user = make_user("operator", f"op-{name}")
    deployment = deployment_create(name=name, cluster=cluster, user=user,
                                   yaml_text=containers_topology(run_dir, edit=edit))
    return run_job_now(deployment_preflight, deployment, user)


def test_preflight_names_the_node_without_the_image_with_another_digest_or_without_docker(
        sim, transactional_db, make_user, run_dir):
    other = {**DEFAULT_IMAGE, "digest": OTHER_DIGEST}
    with node_changed(sim, "node1", images=[]), node_changed(sim, "node2", images=[other]), \
            node_changed(sim, "node3", container_engine="none"):
        job = _preflight(sim, make_user, run_dir, "refc-bad")
    assert job.status == "failed"
    why = job.explanation
    assert "node1: image quay.io/ascend/vllm-ascend:v0.23.0-a3 is not on node1" in why, why
    assert "`docker pull quay.io/ascend/vllm-ascend:v0.23.0-a3` on node1" in why, why
    assert f"image quay.io/ascend/vllm-ascend:v0.23.0-a3 is not the same on every node (node0 " \
           f"{DEFAULT_IMAGE['digest']}, node2 {OTHER_DIGEST}): pull one digest everywhere" in why, why
    assert "node3: `docker version` failed on node3 (sh: 1: docker: not found): install docker there" in why, why
    assert why.startswith("preflight found 3 container problems: ") and "node0:" not in why, why


def test_preflight_refuses_a_pinned_digest_the_nodes_do_not_hold(sim, transactional_db, make_user, run_dir):
    job = _preflight(sim, make_user, run_dir, "refc-pin",
                     edit=lambda data: data["container"].update(digest=OTHER_DIGEST))
    assert job.status == "failed"
    for node in ENGINE_NODES:
        assert f"{node}: image quay.io/ascend/vllm-ascend:v0.23.0-a3 on {node} is {DEFAULT_IMAGE['digest']}, not " \
               f"the pinned {OTHER_DIGEST}" in job.explanation, job.explanation


def test_a_missing_mount_source_fails_podman_preflight_and_warns_for_docker(sim, transactional_db, make_user,
                                                                           run_dir):
    from simcluster.spec import ASCEND_HOST_PATHS

    without_models = [p for p in (*ASCEND_HOST_PATHS, *SHARED_HOST_PATHS) if p != "/models"]
    with node_changed(sim, "node0", host_paths=without_models):
        docker = _preflight(sim, make_user, run_dir, "refc-docker")
        assert docker.status == "successful", docker.explanation
        warned = _events(docker)
        assert "a mount's host path is missing on node0" in warned and "bind source path does not exist: /models" \
            in warned and "docker would create it as an empty directory" in warned, warned
    with node_changed(sim, "node0", host_paths=without_models, container_engine="podman"), \
            node_changed(sim, "node1", container_engine="podman"), node_changed(sim, "node2", container_engine="podman"), \
            node_changed(sim, "node3", container_engine="podman"):
        podman = _preflight(sim, make_user, run_dir, "refc-podman",
                            edit=lambda data: data["container"].update(engine="podman"))
    assert podman.status == "failed"
    assert "node0: a mount's host path is missing on node0 (Error: statfs /models: no such file or directory)" \
        in podman.explanation, podman.explanation
    assert "node1:" not in podman.explanation, podman.explanation
