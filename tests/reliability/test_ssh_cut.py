"""A node's SSH cut mid-deploy and mid-stop (real sshd per node, 127.0.10.25-.29): the job ends failed within a
bound, naming the node and the step; on the nodes, every process of the deployment that runs is one the control
plane records as running or unknown (none it does not know of); once the node's sshd is back, a deploy reconciles
and a stop leaves nothing running.

The cut is the node's sshd listener and per-connection sshd processes frozen, then killed, by PID
(simcluster.cluster.cut_ssh): the TCP connections drop with nothing more getting through, while the commands the
node's sessions already run go on, as with a network cut."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.deployments.simdeploy import (
    pid_alive,
    pids_in,
    processes_mentioning,
    start_cluster,
    stop_cluster,
    topology_yaml,
)
from tests.reliability.stack_procs import wait_until

pytestmark = [pytest.mark.procs,
              pytest.mark.reliability, pytest.mark.django_db(transaction=True), pytest.mark.timeout(300),
              pytest.mark.usefixtures("no_celery")]

FIRST = 25  # node0 .25, node1 .26, node2 .27, node3 .28, proxy .29 (no bench node)
JOB_END_BOUND_S = 60  # after the cut, the job must have ended within this
PARAMS = {"health_timeout": 30, "stop_grace": 3}
COMMAND = 'make reliability PYTEST_ARGS="-k test_ssh_cut"'


@pytest.fixture(scope="module")
def sim():
    state_dir, state = start_cluster(FIRST, without=("bench",))
    try:
        yield state_dir, state
    finally:
        stop_cluster(state_dir)


@pytest.fixture
def deployment(sim, transactional_db, make_user, run_dir):
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import

    inventory_import(Path(sim[1]["inventory"]).read_text(), allow_key_files=True)
    return deployment_create(name="ssh-cut", cluster=Cluster.objects.get(name="reference"),
                             user=make_user("operator", "op"),
                             yaml_text=topology_yaml(run_dir, edit=without_pool_and_bench))


def without_pool_and_bench(data: dict) -> None:
    """The reference topology less its KV pool (an engine whose pool master a failed job's cleanup stopped exits on
    its own, which would hide the process the cut leaves running) and the bench client (.25-.29 hold 5 nodes)."""
    del data["kv_pool"], data["bench_client"]


class JobThread(threading.Thread):
    """run_job in a thread of its own, so the test can cut a node while the job runs and bound how long it takes."""

    def __init__(self, job_id: int):
        super().__init__(name=f"job-{job_id}", daemon=True)
        self.job_id = job_id
        self.ended_at: float | None = None

    def run(self):
        from django.db import connections

        from apps.jobs.runner import run_job

        try:
            run_job(self.job_id)
        finally:
            self.ended_at = time.monotonic()
            connections.close_all()


def start_job(starter, deployment) -> JobThread:
    job = starter(deployment=deployment, user=deployment.created_by, params=PARAMS)
    thread = JobThread(job.pk)
    thread.start()
    return thread


def run_now(starter, deployment):
    thread = start_job(starter, deployment)
    thread.join(240)
    from apps.jobs.models import Job

    return Job.objects.get(pk=thread.job_id)


def cut_until_the_job_ends(state_dir: Path, node: str, thread: JobThread, what: str):
    """Cut node's SSH and wait for the job to end (within JOB_END_BOUND_S), then let sshd back up. Returns the job
    and the seconds from the cut to its end."""
    from apps.jobs.models import Job
    from simcluster import cluster

    cut_at = time.monotonic()
    cluster.cut_ssh(state_dir, node)
    thread.join(JOB_END_BOUND_S)
    assert not thread.is_alive(), f"the {what} did not end within {JOB_END_BOUND_S}s of the cut"
    seconds = thread.ended_at - cut_at
    job = Job.objects.get(pk=thread.job_id)
    cluster.restart_sshd(state_dir, node)
    return job, seconds


def session_commands(state_dir: Path, node: str, needle: str) -> list[int]:
    """The node's SSH session processes whose command line holds needle."""
    from simcluster import cluster

    def below(pid: int):
        try:
            children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                        for c in (task / "children").read_text().split()]
        except OSError:  # it ended meanwhile
            return
        for child in children:
            yield child
            yield from below(child)

    found = []
    for pid in below(cluster.load_state(state_dir)["pids"][f"sshd:{node}"]):
        try:
            if needle.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.decode(errors="replace").split("=", 1) for item in raw.split(b"\0") if b"=" in item)


def unknown_to_the_control_plane(deployment, run_dir: str) -> list[str]:
    """Read on the nodes: every live process working in the run dir carries its start's PDCP_PROCESS marker, and
    the node it runs on has a Process row with that marker the control plane shows as running or unknown (may run).
    Also a running row whose pid is gone. Waits for the cut sessions' own shells to finish first."""
    from apps.deployments.models import Process
    from sshexec import process_marker

    def shells_done():
        return not [p for p in processes_mentioning(run_dir) if "PDCP_PROCESS" not in environ(p)]

    try:
        wait_until(shells_done, 20, "the SSH sessions' shells to end", tick=0.2)
    except AssertionError:
        pass  # reported below as processes nobody knows of
    rows = list(Process.objects.filter(deployment=deployment))
    known = {(r.node_name, process_marker(r.pid_file)): r for r in rows if r.state in ("running", "unknown")}
    problems = []
    for pid in processes_mentioning(run_dir):
        env = environ(pid)
        row = known.get((env.get("SIMCLUSTER_NODE"), env.get("PDCP_PROCESS")))
        if row is None:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120].decode(errors="replace")
            problems.append(f"pid {pid} on {env.get('SIMCLUSTER_NODE')} runs, no running/unknown row: {cmd}")
    problems += [f"{r.key} on {r.node_name} is recorded running as pid {r.pid}, which is gone"
                 for r in rows if r.state == "running" and not pid_alive(r.pid)]
    return problems


def test_ssh_cut_mid_deploy_fails_naming_the_node_and_leaves_nothing_unknown(sim, deployment, run_dir, figure):
    """node0's SSH is cut while it starts p0-dp0, after the process wrote its pid file but before the answer
    (the PID) came back: the process runs and the control plane must know that it may."""
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_deploy, deployment_stop
    from simcluster import cluster

    state_dir, _ = sim
    thread = start_job(deployment_deploy, deployment)
    pid_file = Path(run_dir, "pids", "p0-dp0.pid")
    wait_until(lambda: session_commands(state_dir, "node0", "setsid nohup"), 120, "node0 to start p0-dp0", tick=0.005)
    cluster.freeze_ssh(state_dir, "node0")  # from here on, nothing node0's sessions print reaches the job
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 10, "p0-dp0's pid file", tick=0.005)
    orphan = int(pid_file.read_text())
    job, seconds = cut_until_the_job_ends(state_dir, "node0", thread, "deploy")

    assert job.status == "failed", job.explanation
    assert "step 'start p0-dp0' failed on node0" in job.explanation and "connection to node0 lost" in job.explanation
    assert job.node_summaries.get(node="node0").state == "failed"
    assert pid_alive(orphan)  # started, though the job never heard its PID
    row = Process.objects.get(deployment=deployment, key="p0-dp0")
    assert row.state == "unknown", (row.state, row.state_detail)
    problems = unknown_to_the_control_plane(deployment, run_dir)
    assert not problems, problems

    again = run_now(deployment_deploy, deployment)
    assert again.status == "successful", again.explanation
    assert "10 started, 1 kept" in again.explanation  # the one that ran on: adopted, not started twice
    assert pids_in(run_dir)["p0-dp0"] == orphan
    assert Process.objects.get(deployment=deployment, key="p0-dp0").pid == orphan
    stopped = run_now(deployment_stop, deployment)
    assert stopped.status == "successful", stopped.explanation
    assert not processes_mentioning(run_dir)
    figure("ssh-cut-mid-deploy",
           held="deploy failed naming node0 and step 'start p0-dp0'; the process started there (pid file written, "
                "PID never received) recorded as unknown, no process on the nodes unknown to the control plane; "
                "after sshd came back a deploy adopted it (10 started, 1 kept) and a stop left nothing running",
           figure=f"job failed {seconds:.1f}s after the cut (bound {JOB_END_BOUND_S}s); 0 orphans; "
                  "redeploy and stop successful",
           command=COMMAND, values={"seconds_cut_to_failed": round(seconds, 2), "orphans": len(problems)})


def test_ssh_cut_mid_stop_fails_naming_the_node_and_a_second_stop_finishes(sim, deployment, run_dir, figure):
    """node2's SSH is cut while it stops its Decodes: the stop commands already on the node go on, their answers
    are lost; what the job could not confirm is unknown, never silently stopped or running."""
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_deploy, deployment_stop
    from simcluster import cluster

    state_dir, _ = sim
    deployed = run_now(deployment_deploy, deployment)
    assert deployed.status == "successful", deployed.explanation
    thread = start_job(deployment_stop, deployment)
    stopping = wait_until(lambda: session_commands(state_dir, "node2", "still-running"), 60,
                          "node2 to run a stop command", tick=0.005)
    cluster.freeze_ssh(state_dir, "node2")
    wait_until(lambda: not any(pid_alive(p) for p in stopping), 15, "the frozen stop commands to end", tick=0.005)
    job, seconds = cut_until_the_job_ends(state_dir, "node2", thread, "stop")

    assert job.status == "failed", job.explanation
    assert "could not stop" in job.explanation and "on node2" in job.explanation
    assert "connection to node2 lost" in job.explanation
    assert job.node_summaries.get(node="node2").state != "done"
    unconfirmed = list(Process.objects.filter(deployment=deployment, node_name="node2", state="unknown")
                       .values_list("key", flat=True))
    assert unconfirmed  # the stops whose answers were lost
    assert set(Process.objects.filter(deployment=deployment).exclude(node_name="node2").values_list("state", flat=True)) == {"stopped"}
    problems = unknown_to_the_control_plane(deployment, run_dir)
    assert not problems, problems

    again = run_now(deployment_stop, deployment)
    assert again.status == "successful", again.explanation
    assert not processes_mentioning(run_dir)
    assert set(Process.objects.filter(deployment=deployment).values_list("state", flat=True)) == {"stopped"}
    figure("ssh-cut-mid-stop",
           held="stop failed naming node2 ('could not stop ... on node2', connection lost); the stops whose answers "
                "were lost recorded unknown, every other process stopped; no process on the nodes unknown to the "
                "control plane; after sshd came back a second stop succeeded and nothing runs",
           figure=f"job failed {seconds:.1f}s after the cut (bound {JOB_END_BOUND_S}s); "
                  f"{len(unconfirmed)} of 4 node2 processes left unknown, 0 orphans; second stop successful",
           command=COMMAND, values={"seconds_cut_to_failed": round(seconds, 2), "unknown_after_cut": len(unconfirmed),
                                    "orphans": len(problems)})
