"""Launch files over real SSH on a small simulated cluster (127.0.10.216-.219: node0, node1, proxy, bench): the
deploy writes them before the processes start, a restart rewrites them, stop (and a failed deploy's clean-up)
removes them. The plan's rendering is wrapped to add the files, so these tests do not depend on what a launch
profile renders."""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
import yaml

from simcluster.rundirs import new_run_dir
from sshexec import LaunchFile
from tests.deployments.simdeploy import pid_alive, pids_in, processes_mentioning, remove_run_dir

pytestmark = [pytest.mark.procs,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(240), pytest.mark.usefixtures("no_celery")]

PREFIX, FIRST = "127.0.10", 216
NODES = ("node0", "node1", "proxy", "bench")


def content(node: str) -> str:
    return f"# {node}: $(touch PWNED) `id` 'quoted'\nmaster = 127.0.10.218:50088\n"


@pytest.fixture(scope="module")
def sim():
    from simcluster import cluster
    from simcluster.spec import reference_spec

    spec = reference_spec(prefix=PREFIX)
    spec["nodes"] = [n for n in spec["nodes"] if n["name"] in NODES]
    for i, node in enumerate(spec["nodes"]):
        node["address"] = f"{PREFIX}.{FIRST + i}"
    spec["services"] = {}
    state_dir = Path(tempfile.mkdtemp(prefix="pdcp-files-sim-", dir="/tmp"))
    state_dir.chmod(0o755)
    try:
        yield cluster.up(spec, state_dir)
    finally:
        cluster.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture
def run_dir():
    path = new_run_dir("files")
    yield path
    remove_run_dir(path)


def files_for(run_dir: str, seqs: int = 8) -> dict[str, Path]:
    return {node: Path(run_dir, "config", f"{node}-s{seqs}.conf") for node in ("node0", "node1", "proxy")}


@pytest.fixture
def with_files(monkeypatch, run_dir):
    """Every engine and the proxy get <run_dir>/config/<node>-s<d0's max_num_seqs>.conf (so two revisions name
    different files; the two decode processes of node1 share one)."""
    from apps.deployments.jobs import deployment_run

    real = deployment_run.render_plan

    def render(spec, *args, **kwargs):
        plan = real(spec, *args, **kwargs)
        paths = files_for(run_dir, next(i for i in spec.instances if i.name == "d0").max_num_seqs)

        def extended(p):
            if p.role not in ("prefill", "decode", "proxy"):
                return p
            extra = LaunchFile(str(paths[p.node]), content(p.node), mode=0o640)
            return dataclasses.replace(p, launch=dataclasses.replace(p.launch, files=(*p.launch.files, extra)))

        return dataclasses.replace(plan, stages=tuple(dataclasses.replace(s, processes=tuple(map(extended, s.processes)))
                                                       for s in plan.stages))

    monkeypatch.setattr(deployment_run, "render_plan", render)
    return files_for(run_dir)


def topology(run_dir: str, decode_env: dict | None = None, decode_seqs: int = 8) -> str:
    engine = {"tp": 4, "dp": 1, "api_port": 7100, "max_model_len": 4096, "max_num_seqs": 8,
              "env": {"SIMCLUSTER_STARTUP_S": "0.2"}}
    return yaml.safe_dump({
        "launch_profile": "sim",
        "run_dir": run_dir,
        "model": {"path": "/models/Qwen3-235B-A22B", "served_name": "qwen3-235b",
                  "profile": {"layers": 94, "kv_heads": 4, "head_dim": 128, "dtype": "bfloat16",
                              "attention_heads": 64}},
        "instances": [
            {"name": "p0", "role": "prefill", "node": "node0", "kv_port": 30000, **engine},
            {"name": "d0", "role": "decode", "node": "node1", "kv_port": 30200, "dp_rpc_port": 12321,
             **engine, "dp": 2, "max_num_seqs": decode_seqs, "env": {**engine["env"], **(decode_env or {})}},
        ],
        "proxy": {"node": "proxy", "port": 1999, "policy": "least_conn"},
        "bench_client": {"node": "bench"},
    }, sort_keys=False)


@pytest.fixture
def deployment(sim, transactional_db, make_user, run_dir):
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import

    inventory_import(Path(sim["inventory"]).read_text(), allow_key_files=True)
    user = make_user("operator", "op")
    return deployment_create(name="files", cluster=Cluster.objects.get(name="reference"), user=user,
                             yaml_text=topology(run_dir)), user


def run(starter, deployment, user, **kwargs):
    from apps.jobs.models import Job
    from apps.jobs.runner import run_job

    job = starter(deployment=deployment, user=user, params={"health_timeout": 30, "stop_grace": 3}, **kwargs)
    run_job(job.pk)
    return Job.objects.get(pk=job.pk)


def events(job) -> list[str]:
    return list(job.events.values_list("text", flat=True))


def wrote(job, files) -> list[str]:
    return [e for e in events(job) if e.startswith("wrote ") and any(f"{path} (" in e for path in files.values())]


def test_deploy_writes_the_files_before_the_start_restart_rewrites_them_and_stop_removes_them(deployment,
                                                                                               with_files, run_dir):
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_deploy, deployment_restart, deployment_stop

    deployment, user = deployment
    job = run(deployment_deploy, deployment, user)
    assert job.status == "successful", job.explanation
    for node, path in with_files.items():
        assert path.read_text() == content(node)
        assert stat.S_IMODE(path.stat().st_mode) == 0o640
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert sorted(wrote(job, with_files)) == sorted(f"wrote {path} ({len(content(node).encode())} bytes, mode 0640)"
                                                    for node, path in with_files.items())  # node1's two: once
    for role, command in Process.objects.values_list("role", "command"):
        assert ("sha256sum -c" in command) == (role in ("prefill", "decode", "proxy")) or role == "kv_pool", role
    assert not list(Path(run_dir).rglob("PWNED"))

    with_files["node1"].write_text("tampered\n")
    restarted = run(deployment_restart, deployment, user, instance="d0")
    assert restarted.status == "successful", restarted.explanation
    assert with_files["node1"].read_text() == content("node1")
    assert wrote(restarted, with_files) == [
        f"wrote {with_files['node1']} ({len(content('node1').encode())} bytes, mode 0640)"]

    pids = pids_in(run_dir)
    stopped = run(deployment_stop, deployment, user)
    assert stopped.status == "successful", stopped.explanation
    assert "their 3 launch files are gone" in stopped.explanation
    assert not [p for p in pids.values() if pid_alive(p)]
    assert not any(path.exists() for path in with_files.values())
    assert any(e.startswith("launch files: removed ") for e in events(stopped))

    again = run(deployment_stop, deployment, user)  # the files are gone already: fine
    assert again.status == "successful", again.explanation
    assert any(e.startswith("launch files: absent ") for e in events(again))
    assert not processes_mentioning(run_dir)


def test_a_failed_deploy_removes_the_files_it_wrote_with_the_processes_it_started(deployment, with_files, run_dir):
    from apps.deployments.services import deployment_deploy, revision_create

    deployment, user = deployment
    revision_create(deployment=deployment, user=user, activate=True,
                    yaml_text=topology(run_dir, decode_env={"SIMCLUSTER_STARTUP_S": "not-a-number"}))
    job = run(deployment_deploy, deployment, user)
    assert job.status == "failed" and "wait healthy" in job.explanation
    assert wrote(job, with_files)
    assert not any(path.exists() for path in with_files.values())
    assert not processes_mentioning(run_dir)


def test_stop_removes_no_file_on_a_node_where_a_process_would_not_stop(deployment, with_files, run_dir,
                                                                        monkeypatch):
    from apps.deployments.runtimes import host
    from apps.deployments.services import deployment_deploy, deployment_stop

    deployment, user = deployment
    assert run(deployment_deploy, deployment, user).status == "successful"
    real = host.stop_command
    monkeypatch.setattr(host, "stop_command",
                        lambda pid_file, grace: "exit 1" if "/d0-dp1.pid" in str(pid_file) else real(pid_file, grace))
    stuck = run(deployment_stop, deployment, user)
    assert stuck.status == "failed" and "d0-dp1 on node1" in stuck.explanation
    assert with_files["node1"].exists() and not with_files["node0"].exists() and not with_files["proxy"].exists()
    monkeypatch.setattr(host, "stop_command", real)
    assert run(deployment_stop, deployment, user).status == "successful"
    assert not any(path.exists() for path in with_files.values())
    assert not processes_mentioning(run_dir)
    assert not os.path.exists(f"{run_dir}/pids/d0-dp1.pid")


def test_stop_after_a_new_revision_was_activated_removes_the_files_of_the_one_running(deployment, with_files, run_dir):
    from apps.deployments.services import deployment_deploy, deployment_stop, revision_create

    deployment, user = deployment
    assert run(deployment_deploy, deployment, user).status == "successful"
    revision_create(deployment=deployment, user=user, activate=True, yaml_text=topology(run_dir, decode_seqs=16))
    stopped = run(deployment_stop, deployment, user)
    assert stopped.status == "successful", stopped.explanation
    assert not any(path.exists() for path in with_files.values())
    assert "their 6 launch files are gone" in stopped.explanation  # r2's three were never written: absent
    assert not processes_mentioning(run_dir)


def test_a_symlink_planted_at_a_launch_file_is_refused_and_its_target_never_written(deployment, with_files, run_dir):
    import pwd

    from apps.deployments.services import deployment_deploy

    deployment, user = deployment
    pw = pwd.getpwnam("simnode")
    for path in (run_dir, f"{run_dir}/config"):
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chown(path, pw.pw_uid, pw.pw_gid)
    victim = Path(run_dir, "precious")
    victim.write_text("keep")
    with_files["node0"].symlink_to(victim)
    job = run(deployment_deploy, deployment, user)
    assert job.status == "failed"
    assert f"refusing {with_files['node0']}: it is a symbolic link" in job.explanation
    assert victim.read_text() == "keep"
    assert not processes_mentioning(run_dir)


def test_a_deploy_of_a_revision_with_other_files_removes_the_earlier_ones(deployment, with_files, run_dir):
    from apps.deployments.services import deployment_deploy, deployment_stop, revision_create

    deployment, user = deployment
    assert run(deployment_deploy, deployment, user).status == "successful"
    revision_create(deployment=deployment, user=user, activate=True, yaml_text=topology(run_dir, decode_seqs=16))
    job = run(deployment_deploy, deployment, user)
    assert job.status == "successful", job.explanation
    assert not any(path.exists() for path in with_files.values())
    assert all(path.exists() for path in files_for(run_dir, 16).values())
    assert run(deployment_stop, deployment, user).status == "successful"
    assert not list(Path(run_dir, "config").iterdir())
    assert not processes_mentioning(run_dir)
