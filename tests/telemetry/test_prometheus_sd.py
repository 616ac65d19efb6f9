"""GET /api/prometheus/sd/: what a Prometheus http_sd_config receives for the running processes: one target group
per engine (each DP rank its own), the proxy, the Mooncake master on its metrics port and the store servers marked
exporter="none"; headless ranks and stopped processes are not targets; a viewer's token is needed; the number of
queries does not grow with the number of deployments."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.deployments.models import Deployment, Process

pytestmark = pytest.mark.django_db

ROWS = (  # key, role, instance, node, address, ports, state
    ("p0", "prefill", "p0", "node0", "127.0.10.230", [7100], "running"),
    ("p0-n1", "prefill", "p0", "node1", "127.0.10.231", [], "running"),  # headless DP secondary
    ("d0-dp0", "decode", "d0", "node2", "127.0.10.232", [7100], "running"),
    ("d0-dp1", "decode", "d0", "node2", "127.0.10.232", [7101], "running"),
    ("d1-dp0", "decode", "d1", "node3", "127.0.10.233", [7100], "stopped"),
    ("kv-pool", "kv_pool", "", "proxy", "127.0.10.234", [50088, 9003], "running"),
    ("store-0", "store", "", "proxy", "127.0.10.234", [11211], "running"),
    ("proxy", "proxy", "", "proxy", "127.0.10.234", [1999, 2000], "running"),
)


def add_processes(deployment: Deployment, rows=ROWS) -> None:
    revision = deployment.active_revision
    Process.objects.bulk_create(
        Process(deployment=deployment, revision=revision, node_name=node, role=role, instance=instance, key=key,
                address=address, ports=ports, state=state, command="x", fingerprint="f", log_path="l",
                pid_file="p") for key, role, instance, node, address, ports, state in rows)


def labels(key, role, instance, node, revision="1", deployment="reference"):
    return {"cluster": "reference", "deployment": deployment, "revision": revision, "role": role,
            "instance": instance, "process": key, "node": node}


def test_every_running_target_with_its_labels_and_metrics_port(api_client_for, deployment):
    add_processes(deployment)
    response = api_client_for("viewer").get("/api/prometheus/sd/")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == [
        {"targets": ["127.0.10.232:7100"], "labels": labels("d0-dp0", "decode", "d0", "node2")},
        {"targets": ["127.0.10.232:7101"], "labels": labels("d0-dp1", "decode", "d0", "node2")},
        {"targets": ["127.0.10.234:9003"], "labels": labels("kv-pool", "kv_pool", "kv-pool", "proxy")},
        {"targets": ["127.0.10.230:7100"], "labels": labels("p0", "prefill", "p0", "node0")},
        {"targets": ["127.0.10.234:1999"], "labels": labels("proxy", "proxy", "proxy", "proxy")},
        {"targets": ["127.0.10.234:11211"],
         "labels": {**labels("store-0", "store", "store-0", "proxy"), "exporter": "none"}},
    ]


def test_a_memcache_pool_is_listed_without_an_exporter(api_client_for, deployment):
    revision = deployment.active_revision
    revision.spec = {**revision.spec, "kv_pool": {**revision.spec["kv_pool"], "backend": "memcache"}}
    revision.save(update_fields=["spec"])
    add_processes(deployment, [("kv-pool", "kv_pool", "", "proxy", "127.0.10.234", [5000, 6000, 8000], "running")])
    groups = api_client_for("viewer").get("/api/prometheus/sd/").json()
    assert groups == [{"targets": ["127.0.10.234:8000"],
                       "labels": {**labels("kv-pool", "kv_pool", "kv-pool", "proxy"), "exporter": "none"}}]


def test_filters_by_cluster_and_deployment_name_and_refuses_unknown_parameters(api_client_for, deployment):
    add_processes(deployment)
    viewer = api_client_for("viewer")
    assert len(viewer.get("/api/prometheus/sd/", {"deployment": "reference"}).json()) == 6
    assert len(viewer.get("/api/prometheus/sd/", {"cluster": "reference"}).json()) == 6
    assert viewer.get("/api/prometheus/sd/", {"deployment": "elsewhere"}).json() == []
    response = viewer.get("/api/prometheus/sd/", {"deploymnet": "reference"})
    assert response.status_code == 400 and "deploymnet" in response.content.decode()


def test_needs_a_token_of_a_user_with_a_role(api_client_for, deployment):
    from rest_framework.test import APIClient

    add_processes(deployment)
    anonymous = APIClient().get("/api/prometheus/sd/")
    assert anonymous.status_code == 401 and "127.0.10" not in anonymous.content.decode()
    assert api_client_for(None).get("/api/prometheus/sd/").status_code == 403


def test_queries_do_not_grow_with_deployments(api_client_for, deployment):
    from apps.deployments.models import Revision
    from apps.inventory.models import Cluster

    viewer = api_client_for("viewer")
    add_processes(deployment)
    with CaptureQueriesContext(connection) as one:
        assert len(viewer.get("/api/prometheus/sd/").json()) == 6
    for name in ("second", "third"):
        other = Deployment.objects.create(name=name, cluster=Cluster.objects.create(name=f"{name}-site"))
        Revision.objects.create(deployment=other, number=1, spec=deployment.active_revision.spec, yaml_text="",
                                is_active=True, launch_profile="vllm-ascend", served_model="qwen3-235b")
        add_processes(other)
    with CaptureQueriesContext(connection) as three:
        groups = viewer.get("/api/prometheus/sd/").json()
    assert len(groups) == 18
    assert {(g["labels"]["cluster"], g["labels"]["deployment"]) for g in groups} == {
        ("reference", "reference"), ("second-site", "second"), ("third-site", "third")}
    assert len(three) == len(one), [q["sql"] for q in three.captured_queries]
