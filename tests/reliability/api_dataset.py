"""A realistic amount of data for the REST API cases: clusters, nodes with their NPU dies, deployments with
revisions and processes, deploy jobs with their events and node summaries, eval runs. Made with bulk_create
(fast), except the first deployment, which goes through deployment_create so its revision is a real, validated
spec (the topology snapshot renders it)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

REFERENCE_NODES = (("node0", 16), ("node1", 16), ("node2", 16), ("node3", 16), ("proxy", 0), ("bench", 0))
FIXED_TOPOLOGY = Path(__file__).resolve().parents[2] / "examples" / "reference-topology-fixed.yaml"


@dataclass
class Sizes:
    clusters: int = 3
    nodes: int = 100
    npus: int = 1000
    deployments: int = 50
    revisions_per_deployment: int = 2
    processes_per_deployment: int = 6
    jobs: int = 2000
    events: int = 50_000
    runs: int = 50


@dataclass
class Dataset:
    user: object
    node_id: int
    deployment_id: int
    job_id: int  # a job with events
    run_id: int | None


def build_dataset(sizes: Sizes, *, address_base: str = "127.0.10") -> Dataset:
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role

    user = get_user_model().objects.create_user("api-load-operator", password="api-load-password-1")
    set_role(user, Role.OPERATOR)
    nodes = _inventory(sizes, address_base)
    deployments = _deployments(sizes, nodes, user)
    job_id = _jobs(sizes, deployments, user)
    run_id = _eval_runs(sizes, deployments)
    return Dataset(user=user, node_id=nodes[0].pk, deployment_id=deployments[0].pk, job_id=job_id, run_id=run_id)


def _inventory(sizes: Sizes, address_base: str) -> list:
    from apps.inventory.models import Cluster, Node, Npu, SshCredential
    from apps.inventory.services import credential_save
    from tests.keys import TEST_HOST_KEY, TEST_PRIVATE_KEY

    credential = credential_save(SshCredential(name="load", username="simnode"), secret=TEST_PRIVATE_KEY)
    clusters = [Cluster.objects.create(name="reference" if i == 0 else f"site-{i}") for i in range(sizes.clusters)]
    wanted = list(REFERENCE_NODES[: sizes.nodes])
    wanted += [(f"n{i:03d}", 16) for i in range(sizes.nodes - len(wanted))]
    nodes = Node.objects.bulk_create([
        Node(cluster=clusters[0] if i < len(REFERENCE_NODES) else clusters[i % sizes.clusters], name=name,
             address=f"{address_base}.{i % 250 + 1}", ssh_port=22 + i, credential=credential, host_key=TEST_HOST_KEY,
             npu_count=npus, hardware_model="Atlas 800I A3" if npus else "server", npu_model="Ascend910" if npus else "")
        for i, (name, npus) in enumerate(wanted)])
    npu_nodes = [n for n in nodes if n.npu_count]
    dies = []
    for i in range(sizes.npus):
        node, die = npu_nodes[(i // 16) % len(npu_nodes)], i % 16 + 16 * (i // (16 * len(npu_nodes)))
        dies.append(Npu(node=node, npu_id=die // 2, chip_id=die % 2, logical_id=die, name="Ascend910",
                        health="OK" if i < 64 or i % 37 else "Warning", hbm_total_mb=65536, hbm_used_mb=1024 * (i % 60)))
    Npu.objects.bulk_create(dies)
    return nodes


def _deployments(sizes: Sizes, nodes: list, user) -> list:
    from apps.deployments.models import Deployment, Process, Revision
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster

    first = deployment_create(name="reference", cluster=nodes[0].cluster, user=user,
                              yaml_text=FIXED_TOPOLOGY.read_text())
    rev = first.active_revision
    # The copies live on the other clusters: on the first they would claim the same dies and ports as it does.
    sites = list(Cluster.objects.exclude(pk=first.cluster_id)) or [first.cluster]
    others = Deployment.objects.bulk_create([Deployment(name=f"load-{i:03d}", cluster=sites[i % len(sites)],
                                                        created_by=user)
                                             for i in range(sizes.deployments - 1)])
    revisions = Revision.objects.bulk_create([
        Revision(deployment=d, number=n, spec=copy.deepcopy(rev.spec), yaml_text=rev.yaml_text,
                 is_active=n == sizes.revisions_per_deployment, launch_profile=rev.launch_profile,
                 served_model=rev.served_model, created_by=user)
        for d in others for n in range(1, sizes.revisions_per_deployment + 1)])
    active = {r.deployment_id: r for r in revisions if r.is_active}
    Process.objects.bulk_create([
        Process(deployment=d, revision=active[d.pk], node=nodes[k % len(nodes)], node_name=nodes[k % len(nodes)].name,
                role="prefill", instance=f"p{k}", key=f"p{k}-dp0", address=nodes[k % len(nodes)].address,
                ports=[7100 + k], command="vllm serve /models/x", fingerprint="f" * 64, log_path=f"/l/{k}",
                pid_file=f"/p/{k}", state="running" if k % 2 else "stopped", pid=1000 + k)
        for d in others for k in range(sizes.processes_per_deployment)])
    return [first, *others]


def _jobs(sizes: Sizes, deployments: list, user) -> int:
    from django.utils import timezone

    from apps.jobs.models import Job, JobEvent, JobNodeSummary

    now = timezone.now()
    per_job = max(1, sizes.events // sizes.jobs)
    jobs = Job.objects.bulk_create([
        Job(kind="deploy", status="successful", target_type="deployments.deployment",
            target_id=deployments[i % len(deployments)].pk, target_label=deployments[i % len(deployments)].name,
            params={"health_timeout": 30}, created_by=user, started=now, finished=now, event_count=per_job,
            explanation="deployed")
        for i in range(sizes.jobs)])
    JobNodeSummary.objects.bulk_create([JobNodeSummary(job=j, node=f"node{k}", state="done", steps_done=4,
                                                       steps_total=4) for j in jobs for k in range(2)])
    events = [JobEvent(job=j, counter=c, node="node0", stream="stdout", text=f"line {c} of job {j.pk}: started ok")
              for j in jobs for c in range(1, per_job + 1)]
    JobEvent.objects.bulk_create(events, batch_size=5000)
    return jobs[0].pk


def _eval_runs(sizes: Sizes, deployments: list) -> int | None:
    from apps.evals.models import EvalRun

    if not sizes.runs:
        return None
    d = deployments[0]
    rev = d.active_revision
    runs = EvalRun.objects.bulk_create([
        EvalRun(deployment=d, deployment_name=d.name, revision=rev, revision_number=rev.number,
                revision_spec=copy.deepcopy(rev.spec), endpoint_url="http://127.0.10.49:1999/",
                served_model="qwen3-235b", mode="accuracy", dataset_key="catalogue:aime2025", dataset_abbr="aime2025",
                dataset_family="aime", status="succeeded", progress_done=30, progress_total=30)
        for _ in range(sizes.runs)])
    return runs[0].pk
