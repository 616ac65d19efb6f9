"""What the lost-worker and reboot cases share: a deployment on the simulated cluster (127.0.10.30-.35) driven
through the live control plane's REST API, a deploy caught after its first processes started, and waits on the
jobs in the database."""

from __future__ import annotations

import itertools
import time

import pytest

from tests.deployments.simdeploy import cluster_fixture, import_inventory, topology_yaml
from tests.reliability.node_truth import rows_against_nodes, running_on_nodes
from tests.reliability.stack_procs import ControlPlane, free_port

FIRST = 30
PROXY_NODE = f"127.0.10.{FIRST + 4}"  # the reference cluster's proxy host, where the KV pool runs
HEARTBEAT_TIMEOUT_S = 8  # JOB_HEARTBEAT_TIMEOUT_SECONDS of the live control plane: its workers sweep every 4 s
_cases = itertools.count(1)
SLOW_INSTANCE_S = "15"  # the first Decode's start-up: the deploy is still waiting on it when the worker dies


# --- fixtures (each module imports them) -----------------------------------------------------------------

sim = cluster_fixture(FIRST)


@pytest.fixture
def inventory(sim, transactional_db):
    return import_inventory(sim)


@pytest.fixture
def cp(transactional_db, tmp_path, settings):
    plane = ControlPlane(tmp_path, f"{settings.PDCP_NAMESPACE}-lost",
                         JOB_HEARTBEAT_TIMEOUT_SECONDS=str(HEARTBEAT_TIMEOUT_S))
    try:
        plane.start_redis()
        yield plane
    finally:
        plane.close()


@pytest.fixture
def operator(make_user):
    from rest_framework.authtoken.models import Token

    user = make_user("operator", "op")
    user.token = Token.objects.create(user=user).key
    return user


# --- steps --------------------------------------------------------------------------------------------------

def make_deployment(inventory, user, run_dir: str, name: str):
    """The reference topology, its first Decode slow to start, on ports of its own: a process of the case
    before may have left connections in TIME_WAIT on its ports, which a start that binds without SO_REUSEADDR
    (mooncake_master) cannot take."""
    from apps.deployments.services import deployment_create

    shift = 100 * next(_cases) % 500  # ports of its own, away from those of the case before

    def edit(data):
        data["instances"][2]["env"]["SIMCLUSTER_STARTUP_S"] = SLOW_INSTANCE_S
        for inst in data["instances"]:
            for key in ("api_port", "kv_port", "dp_rpc_port"):
                if key in inst:
                    inst[key] += shift
        data["proxy"]["port"] += shift
        data["kv_pool"].update(rpc_port=free_port(PROXY_NODE), metrics_port=free_port(PROXY_NODE))

    yaml_text = topology_yaml(run_dir, edit=edit)
    return deployment_create(name=name, cluster=inventory, user=user, yaml_text=yaml_text)


def start_job(cp, token: str, deployment, action: str) -> int:
    status, body = cp.api(token, "POST", f"/api/deployments/{deployment.pk}/{action}/",
                          {"health_timeout": 60, "stop_grace": 3})
    assert status == 202, body
    return body["id"]


def wait_until_engines_started(deployment, job_id: int, timeout: float = 120) -> None:
    """Until the deploy has recorded the slow Decode as started (so the KV pool and the engines run) and still
    waits on its health."""
    from apps.deployments.models import Process
    from apps.jobs.models import Job

    deadline = time.monotonic() + timeout
    while not Process.objects.filter(deployment=deployment, key="d0-dp0", state="running").exists():
        job = Job.objects.get(pk=job_id)
        assert job.status in ("pending", "running"), f"the deploy ended before its engines: {job.explanation}"
        assert time.monotonic() < deadline, "the deploy never started its engines"
        time.sleep(0.2)
    assert Job.objects.get(pk=job_id).status == "running"


def wait_job(job_id: int, *, timeout: float, leaving: tuple[str, ...] = ("pending", "running")):
    """The job once its status is no longer one of `leaving`."""
    from apps.jobs.models import Job

    deadline = time.monotonic() + timeout
    while (job := Job.objects.get(pk=job_id)).status in leaving:
        assert time.monotonic() < deadline, f"job #{job_id} still {job.status} after {timeout}s"
        time.sleep(0.25)
    return job


def wait_refresh(deployment, *, after_job: int, timeout: float):
    """The refresh job queued for the deployment after `after_job`, once it ended."""
    from apps.jobs.models import Job

    deadline = time.monotonic() + timeout
    refreshes = Job.objects.filter(kind="refresh", target_id=deployment.pk, pk__gt=after_job)
    while not (found := refreshes.first()):
        assert time.monotonic() < deadline, "no refresh job was queued"
        time.sleep(0.25)
    return wait_job(found.pk, timeout=timeout)


def refresh_matches_nodes(deployment, run_dir: str, *, after_job: int):
    """The refresh queued after the lost job, once it succeeded with the rows matching the nodes."""
    refresh = wait_refresh(deployment, after_job=after_job, timeout=120)
    assert refresh.status == "successful", refresh.explanation
    assert not rows_against_nodes(deployment, run_dir), rows_against_nodes(deployment, run_dir)
    return refresh


def stop_leaves_nothing(cp, token: str, deployment, run_dir: str) -> float:
    """A stop by API succeeds and leaves nothing running on the nodes; returns how long it took."""
    started = time.monotonic()
    stop = wait_job(start_job(cp, token, deployment, "stop"), timeout=120)
    seconds = time.monotonic() - started
    assert stop.status == "successful", stop.explanation
    assert not running_on_nodes(run_dir)
    return seconds


def running_pids(deployment) -> dict[str, int]:
    from apps.deployments.models import Process

    return dict(Process.objects.filter(deployment=deployment, state="running").values_list("key", "pid"))


def corrected_rows(refresh) -> int:
    """How many rows the refresh found wrong (no row, another state or pid): its events say so per process."""
    from django.db.models import Q

    said = Q(text__contains="the row said") | Q(text__contains="no row recorded it")
    return refresh.events.filter(said).count()
