"""Issue 11's finish line on the simulated cluster (127.0.10.200-.205): the reference topology with its Mooncake KV
pool and a Decode instance spanning two nodes deploys with the vllm-ascend rendering (MultiConnector,
AscendStoreConnector, mooncake.json written by the job), serves through the proxy, grows the pool's key count on
repeated prefixes, hits the pool on the second Prefill of a shared prefix, and stop leaves nothing: no process, no
config file."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from tests.deployments.simdeploy import (
    cluster_fixture,
    import_inventory,
    pids_in,
    processes_mentioning,
    run_job_now,
    topology_yaml,
)

pytestmark = [pytest.mark.procs,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(240), pytest.mark.usefixtures("no_celery")]
FIRST = 200
sim = cluster_fixture(FIRST)


@pytest.fixture
def inventory(sim, transactional_db):
    return import_inventory(sim)


def spanning_decode(data: dict) -> None:
    """d0 becomes one instance of DP8 x TP4 over node2 and node3 (4 ranks on each); d1 goes."""
    data["instances"] = [i for i in data["instances"] if i["name"] != "d1"]
    d0 = next(i for i in data["instances"] if i["name"] == "d0")
    del d0["node"]
    d0.update(nodes=["node2", "node3"], dp=8)
    data["kv_pool"]["consumer_is_to_load"] = True


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def metric(url: str, name: str, **labels) -> float:
    """Sum of one metric's samples (optionally only those with these labels) on a Prometheus page."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_pool_and_spanning_instance_deploy_serve_share_prefixes_and_stop_clean(inventory, make_user, run_dir):
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop

    operator = make_user("operator", "op")
    deployment = deployment_create(name="pool", cluster=inventory, user=operator,
                                   yaml_text=topology_yaml(run_dir, edit=spanning_decode))
    job = run_job_now(deployment_deploy, deployment, operator)
    assert job.status == "successful", job.explanation
    keys = set(Process.objects.filter(deployment=deployment).values_list("key", flat=True))
    assert {f"d0-dp{r}" for r in range(8)} <= keys and "kv-pool" in keys and len(keys) == 12
    nodes_of_d0 = set(Process.objects.filter(deployment=deployment, key__startswith="d0-").values_list(
        "node_name", flat=True))
    assert nodes_of_d0 == {"node2", "node3"}
    config = Path(run_dir, "config", "mooncake.json")
    assert config.stat().st_mode & 0o777 == 0o600
    assert json.loads(config.read_text())["master_server_address"] == f"127.0.10.{FIRST + 4}:50088"

    proxy = f"http://127.0.10.{FIRST + 4}:1999"
    master = f"http://127.0.10.{FIRST + 4}:9003/metrics"
    prefix = " ".join(f"word{i}" for i in range(600))  # many KV blocks
    keys_before = metric(master, "master_key_count")
    first = post(f"{proxy}/v1/completions", {"model": "qwen3-235b", "prompt": prefix + " first", "max_tokens": 4})
    assert first["choices"][0]["text"]
    deadline = time.monotonic() + 20
    while metric(master, "master_key_count") <= keys_before and time.monotonic() < deadline:
        time.sleep(0.2)  # the Prefill backs its blocks up after answering
    keys_after = metric(master, "master_key_count")
    assert keys_after > keys_before

    prefills = [p for p in Process.objects.filter(deployment=deployment, role="prefill")]
    def pool_hits():
        return sum(metric(f"http://{p.address}:{p.ports[0]}/metrics", "vllm:external_prefix_cache_hits_total")
                   for p in prefills)
    hits_before = pool_hits()
    for _ in range(len(prefills)):  # round robin/least_conn: every Prefill sees the shared prefix at least once
        post(f"{proxy}/v1/completions", {"model": "qwen3-235b", "prompt": prefix + " again", "max_tokens": 4})
    assert pool_hits() > hits_before
    print(f"\npool keys {keys_before:.0f} -> {keys_after:.0f}; pool hits {hits_before:.0f} -> {pool_hits():.0f} tokens")

    stopped = run_job_now(deployment_stop, deployment, operator)
    assert stopped.status == "successful", stopped.explanation
    assert not processes_mentioning(run_dir) and not pids_in(run_dir)
    assert not config.exists(), "stop leaves the launch files behind"
