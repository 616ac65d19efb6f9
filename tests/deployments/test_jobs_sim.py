"""Deploy, stop, restart and preflight against the simulated cluster over real SSH (127.0.10.210-.215).

One cluster for the module (sshd per node, shims); every test imports its inventory, deploys into its own run dir
and proves with /proc that nothing it started is left running.
"""

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from tests.deployments.simdeploy import (
    REPO,
    pid_alive,
    pids_in,
    processes_mentioning,
    remove_run_dir,
    start_cluster,
    stop_cluster,
    topology_yaml,
)

pytestmark = [pytest.mark.procs,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(240), pytest.mark.usefixtures("no_celery")]


@pytest.fixture(scope="module")
def sim():
    state_dir, state = start_cluster()
    try:
        yield state_dir, state
    finally:
        stop_cluster(state_dir)


@pytest.fixture
def inventory(sim, transactional_db):
    from pathlib import Path

    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import

    state_dir, state = sim
    inventory_import(Path(state["inventory"]).read_text(), allow_key_files=True)
    return Cluster.objects.get(name="reference")


@pytest.fixture
def operator(make_user):
    return make_user("operator", "op")


def make_deployment(cluster, user, run_dir, edit=None):
    from apps.deployments.services import deployment_create

    return deployment_create(name="ref", cluster=cluster, user=user, yaml_text=topology_yaml(run_dir, edit=edit))


def run(starter, deployment, user, **kwargs):
    from apps.jobs.models import Job
    from apps.jobs.runner import run_job

    params = {"health_timeout": 30, "stop_grace": 3, **kwargs.pop("params", {})}
    job = starter(deployment=deployment, user=user, params=params, **kwargs)
    run_job(job.pk)
    return Job.objects.get(pk=job.pk)


def completion(address: str, port: int = 1999) -> dict:
    import json

    body = json.dumps({"model": "qwen3-235b", "prompt": "hello", "max_tokens": 4}).encode()
    req = urllib.request.Request(f"http://{address}:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=20).read())


def worker_children(pid: int) -> list[int]:
    from pathlib import Path

    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]


def test_deploy_serves_a_completion_redeploy_keeps_everything_and_stop_leaves_nothing(inventory, operator, run_dir):
    """With the proxy as a supervisor and 2 workers: the rolling restart's drains go through its admin API."""
    from apps.deployments.models import Process
    from apps.deployments.services import (
        deployment_deploy,
        deployment_preflight,
        deployment_rolling_restart,
        deployment_stop,
        revision_create,
    )

    def two_workers(data):
        data["proxy"]["workers"] = 2

    deployment = make_deployment(inventory, operator, run_dir, edit=two_workers)
    pre = run(deployment_preflight, deployment, operator)
    assert pre.status == "successful", pre.explanation

    t0 = time.monotonic()
    job = run(deployment_deploy, deployment, operator)
    first_seconds = time.monotonic() - t0
    assert job.status == "successful", job.explanation
    assert "12 processes (12 started" in job.explanation and "answered a completion" in job.explanation
    assert {s.state for s in job.node_summaries.all()} == {"done"}
    proxy_address = Process.objects.get(key="proxy").address
    assert completion(proxy_address)["choices"][0]["text"]
    pids = pids_in(run_dir)
    assert len(pids) == 12 and all(pid_alive(p) for p in pids.values())
    assert dict(Process.objects.values_list("key", "pid")) == pids
    workers = worker_children(pids["proxy"])
    assert len(workers) == 2 and all(pid_alive(w) for w in workers)

    again = run(deployment_deploy, deployment, operator)
    assert again.status == "successful", again.explanation
    assert "0 started, 12 kept" in again.explanation
    assert pids_in(run_dir) == pids  # nothing started twice

    # A new revision that changes d1 only: its four processes are replaced, everything else kept.
    revision_create(deployment=deployment, user=operator, activate=True, yaml_text=topology_yaml(
        run_dir, edit=lambda d: (two_workers(d), d["instances"][3].update(max_num_seqs=48))))
    changed = run(deployment_deploy, deployment, operator)
    assert changed.status == "successful", changed.explanation
    assert "4 started, 4 replaced, 8 kept" in changed.explanation
    now = pids_in(run_dir)
    assert {k for k in now if now[k] != pids[k]} == {"d1-dp0", "d1-dp1", "d1-dp2", "d1-dp3"}

    rolling = run(deployment_rolling_restart, deployment, operator, role="prefill")
    assert rolling.status == "successful", rolling.explanation
    assert "drained in the proxy" in rolling.explanation
    after = pids_in(run_dir)
    assert after["p0-dp0"] != now["p0-dp0"] and after["d0-dp0"] == now["d0-dp0"]
    assert completion(proxy_address)["choices"][0]["text"]

    stopped = run(deployment_stop, deployment, operator)
    assert stopped.status == "successful", stopped.explanation
    assert not [p for p in [*after.values(), *workers] if pid_alive(p)]
    assert set(Process.objects.values_list("state", flat=True)) == {"stopped"}
    assert not processes_mentioning(run_dir)
    print(f"\nfirst deploy of 12 processes: {first_seconds:.1f}s")


def test_a_layerwise_deployment_serves_through_the_metaserver_with_two_proxy_workers(inventory, operator, run_dir):
    """kv_connector: layerwise over SSH: every engine runs MooncakeLayerwiseConnector, the proxy --pd-flow layerwise;
    a Decode calls the proxy's metaserver back and the Prefill pushes it the KV."""
    from pathlib import Path

    from apps.deployments.models import Process
    from apps.deployments.services import deployment_deploy, deployment_stop

    def layerwise(data):
        data["kv_connector"] = "layerwise"
        data["proxy"]["workers"] = 2

    deployment = make_deployment(inventory, operator, run_dir, edit=layerwise)
    job = run(deployment_deploy, deployment, operator)
    assert job.status == "successful", job.explanation
    proxy = Process.objects.get(key="proxy")
    for _ in range(4):
        assert completion(proxy.address)["choices"][0]["text"]
    logs = "".join(p.read_text(errors="replace") for p in Path(run_dir).glob("logs/d*.log"))
    assert f"to proxy metaserver: http://{proxy.address}:1999/v1/metaserver" in logs
    assert len(worker_children(pids_in(run_dir)["proxy"])) == 2
    stopped = run(deployment_stop, deployment, operator)
    assert stopped.status == "successful", stopped.explanation
    assert not processes_mentioning(run_dir)


def test_cache_aware_with_kv_events_routes_by_the_prefills_kv_cache_events(inventory, operator, run_dir):
    """proxy.kv_events over SSH: the Prefills publish their KV cache events, the proxy subscribes with the simulated
    tokenizer, and the same long prompt sent again is routed by the exact view (picks with reason kv_events)."""
    import json
    import re

    from apps.deployments.models import Process
    from apps.deployments.services import deployment_deploy, deployment_stop

    def exact_view(data):
        data["proxy"].update(policy="cache_aware", kv_events={"port": 5557, "replay_port": 5558})
        for inst in data["instances"]:
            if "--no-enable-prefix-caching" in inst["extra_args"]:
                inst["extra_args"].remove("--no-enable-prefix-caching")

    deployment = make_deployment(inventory, operator, run_dir, edit=exact_view)
    job = run(deployment_deploy, deployment, operator)
    assert job.status == "successful", job.explanation
    proxy = Process.objects.get(key="proxy")
    # Every word one the simulated tokenizer knows (bench/proxy/cache_aware.py): a block holding an unknown one
    # matches no event.
    prompt = ("The assistant of the ascend npu system has the answer for the user: Look at the cache first, and "
              "the batch and the stream. ") * 12
    body = json.dumps({"model": "qwen3-235b", "prompt": prompt, "max_tokens": 2}).encode()

    def metric(name: str, reason: str | None = None) -> float:
        raw = urllib.request.urlopen(f"http://{proxy.address}:1999/metrics", timeout=10).read().decode()
        rows = re.findall(rf"^{name}\{{([^}}]*)\}} (\S+)$", raw, re.M)
        return sum(float(v) for labels, v in rows if reason is None or f'reason="{reason}"' in labels)

    picks = 0.0
    deadline = time.monotonic() + 20
    while picks == 0 and time.monotonic() < deadline:
        req = urllib.request.Request(f"http://{proxy.address}:1999/v1/completions", body,
                                     {"Content-Type": "application/json"})
        assert json.loads(urllib.request.urlopen(req, timeout=20).read())["choices"][0]["text"]
        picks = metric("pdproxy_cache_aware_picks_total", "kv_events")
        time.sleep(0.2)
    assert picks > 0
    assert metric("pdproxy_cache_aware_kv_blocks") > 0
    stopped = run(deployment_stop, deployment, operator)
    assert stopped.status == "successful", stopped.explanation
    assert not processes_mentioning(run_dir)


def test_an_engine_that_dies_during_deploy_fails_the_job_with_its_log_and_stops_the_rest(inventory, operator,
                                                                                          run_dir):
    from apps.deployments.services import deployment_deploy

    def broken(d):
        d["instances"][3]["env"]["SIMCLUSTER_STARTUP_S"] = "not-a-number"  # the engine crashes while starting

    deployment = make_deployment(inventory, operator, run_dir, edit=broken)
    job = run(deployment_deploy, deployment, operator)
    assert job.status == "failed"
    assert "step 'wait healthy' failed on node3: d1-dp" in job.explanation
    assert "last log lines of d1-dp" in job.explanation and "ValueError" in job.explanation
    assert job.node_summaries.get(node="node3").state == "failed"
    assert "stopping the 11 processes this job started" in "\n".join(job.events.values_list("text", flat=True))
    assert not processes_mentioning(run_dir)


def test_keep_on_failure_leaves_the_processes_for_debugging(inventory, operator, run_dir):
    from apps.deployments.services import deployment_deploy, deployment_stop

    deployment = make_deployment(inventory, operator, run_dir,
                                 edit=lambda d: d["instances"][0]["env"].update(SIMCLUSTER_STARTUP_S="x"))
    job = run(deployment_deploy, deployment, operator, params={"keep_on_failure": True})
    assert job.status == "failed" and "p0-dp0" in job.explanation
    assert processes_mentioning(run_dir)  # kept, as asked
    assert run(deployment_stop, deployment, operator).status == "successful"
    assert not processes_mentioning(run_dir)


def test_unreachable_node_fails_before_anything_starts(sim, inventory, operator, run_dir):
    from apps.deployments.services import deployment_deploy
    from simcluster import cluster, procs

    state_dir, _ = sim
    deployment = make_deployment(inventory, operator, run_dir)
    procs.stop_pid(cluster.load_state(state_dir)["pids"]["sshd:node2"])
    try:
        job = run(deployment_deploy, deployment, operator)
    finally:
        cluster.restart_sshd(state_dir, "node2")
    assert job.status == "failed"
    assert "node2" in job.explanation and "unreachable" in job.explanation
    assert "before anything was started" in job.explanation
    assert not pids_in(run_dir)


def test_changed_host_key_is_refused(inventory, operator, run_dir):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from apps.deployments.services import deployment_deploy
    from apps.inventory.models import Node

    deployment = make_deployment(inventory, operator, run_dir)
    other = Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    Node.objects.filter(cluster=inventory, name="node1").update(host_key=other)
    job = run(deployment_deploy, deployment, operator)
    assert job.status == "failed"
    assert "host key for node1" in job.explanation and "changed" in job.explanation
    assert Node.objects.get(cluster=inventory, name="node1").reachability == "host_key_mismatch"
    assert not pids_in(run_dir)


def test_cancel_mid_deploy_stops_what_the_job_started(inventory, operator, run_dir):
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_deploy
    from apps.jobs.models import Job
    from apps.jobs.runner import run_job
    from apps.jobs.services import job_cancel

    deployment = make_deployment(inventory, operator, run_dir,
                                 edit=lambda d: d["instances"][2]["env"].update(SIMCLUSTER_STARTUP_S="60"))
    job = deployment_deploy(deployment=deployment, user=operator, params={"health_timeout": 90, "stop_grace": 3})
    def work():
        from django.db import connections

        try:
            run_job(job.pk)
        finally:
            connections.close_all()  # this thread's own connection, or the test database cannot be dropped

    worker = threading.Thread(target=work)
    worker.start()
    deadline = time.monotonic() + 60
    while not Process.objects.filter(key="d0-dp0", state="running").exists():
        assert time.monotonic() < deadline, "the engines never started"
        time.sleep(0.2)
    job_cancel(Job.objects.get(pk=job.pk), user=operator)
    worker.join(60)
    assert not worker.is_alive()
    job.refresh_from_db()
    assert job.status == "canceled"
    assert not processes_mentioning(run_dir)


def test_a_killed_worker_is_swept_and_stop_finds_what_it_left(inventory, operator, run_dir):
    from django.db import connection

    from apps.deployments.services import deployment_deploy, deployment_stop
    from apps.jobs.models import Job
    from apps.jobs.runner import run_job
    from apps.jobs.services import sweep_orphaned_jobs

    deployment = make_deployment(inventory, operator, run_dir,
                                 edit=lambda d: d["instances"][2]["env"].update(SIMCLUSTER_STARTUP_S="60"))
    job = deployment_deploy(deployment=deployment, user=operator, params={"health_timeout": 90})
    db = connection.settings_dict
    env = {**os.environ, "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"}
    worker = subprocess.Popen([sys.executable, "manage.py", "shell", "-c",
                               f"from apps.jobs.runner import run_job; run_job({job.pk})"],
                              cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(pids_in(run_dir)) < 11:  # pool and engines started; d0 is slow to become healthy
            assert time.monotonic() < deadline and worker.poll() is None, "the worker never got to the engines"
            time.sleep(0.2)
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    assert Job.objects.get(pk=job.pk).status == "running"
    assert sweep_orphaned_jobs(local_dead_only=True) == [job.pk]
    job.refresh_from_db()
    assert job.status == "failed" and "is gone" in job.explanation
    assert processes_mentioning(run_dir)  # the dead worker could not clean up ...
    refresh = Job.objects.get(kind="refresh", target_id=deployment.pk, status="pending")  # queued by the sweep
    run_job(refresh.pk)
    refresh.refresh_from_db()
    assert refresh.status == "successful", refresh.explanation
    stopped = run(deployment_stop, deployment, operator)  # ... stop reads every pid file the plan names
    assert stopped.status == "successful", stopped.explanation
    assert not processes_mentioning(run_dir)


@pytest.fixture
def exposed_run_dir():
    """A run dir below /tmp, where every local user may create files: what the start must refuse."""
    path = f"/tmp/pdcp-deploy-exposed-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    yield path
    remove_run_dir(path)


def as_login_user(*paths: str) -> None:
    """Create these directories (0700) as the simulated nodes' login user would own them."""
    import pwd

    pw = pwd.getpwnam("simnode")
    for path in paths:
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chown(path, pw.pw_uid, pw.pw_gid)


def test_a_run_dir_other_local_users_could_reach_is_refused_before_anything_starts(inventory, operator,
                                                                                   exposed_run_dir):
    from apps.deployments.services import deployment_deploy, deployment_preflight

    deployment = make_deployment(inventory, operator, exposed_run_dir)
    pre = run(deployment_preflight, deployment, operator)
    assert pre.status == "failed"
    assert f"run_dir {exposed_run_dir} would be refused" in pre.explanation
    assert "refusing /tmp: it is writable by group or others (mode 1777)" in pre.explanation
    job = run(deployment_deploy, deployment, operator)
    assert job.status == "failed"
    assert "step 'start kv-pool' failed" in job.explanation
    assert "refusing /tmp: it is writable by group or others (mode 1777)" in job.explanation
    assert not os.path.exists(exposed_run_dir)  # nothing created, nothing started
    assert not processes_mentioning(exposed_run_dir)


def test_a_symlinked_secrets_dir_is_refused_and_the_token_never_lands_in_its_target(inventory, operator, run_dir):
    from apps.deployments.services import deployment_deploy

    elsewhere = f"{run_dir}/elsewhere"
    as_login_user(run_dir, elsewhere)
    os.symlink(elsewhere, f"{run_dir}/secrets")
    deployment = make_deployment(inventory, operator, run_dir)
    job = run(deployment_deploy, deployment, operator)
    assert job.status == "failed"
    assert f"refusing {run_dir}/secrets: it is a symbolic link" in job.explanation
    assert os.listdir(elsewhere) == []
    assert not processes_mentioning(run_dir)  # the job stopped what it had started


def test_stop_leaves_alone_a_process_a_planted_pid_file_names(inventory, operator, run_dir):
    from apps.deployments.services import deployment_stop

    as_login_user(run_dir, f"{run_dir}/pids")
    unrelated = subprocess.Popen(["setsid", "sleep", "300"], user="simnode", stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pid_file = f"{run_dir}/pids/proxy.pid"
        with open(pid_file, "w") as fh:
            fh.write(f"{unrelated.pid}\n")
        deployment = make_deployment(inventory, operator, run_dir)
        job = run(deployment_stop, deployment, operator)
        assert job.status == "successful", job.explanation
        assert unrelated.poll() is None, "stop signalled a process the control plane never started"
        events = "\n".join(job.events.values_list("text", flat=True))
        assert f"proxy: foreign {unrelated.pid}" in events and "not signalled" in events
        assert not os.path.exists(pid_file)
    finally:
        unrelated.kill()
        unrelated.wait(10)
