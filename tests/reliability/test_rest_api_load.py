"""The REST API under sustained load: a real daphne (as `make run` serves it) on the PostgreSQL test database holding
a realistic inventory and history (3 clusters, 100 nodes, 1,000 NPU dies, 50 deployments with revisions and
processes, 2,000 jobs with 50,000 events, eval runs). Each main list and detail endpoint gets 16 clients with API
tokens for a fixed time; every answer must be a 200, every list a bounded page (limit/offset), never the whole
table, and the server may hold no more database connections than it has requests in flight (it once kept one per
request it had served, until PostgreSQL refused every client)."""

import time

import pytest

from tests.reliability.api_dataset import Sizes, build_dataset
from tests.reliability.http_load import sustained_get
from tests.reliability.stack_procs import ConnectionPeak, cpu_seconds, stack_env, start_daphne, stop

pytestmark = [pytest.mark.procs, pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

CLIENTS = 16
SECONDS = 8.0
PAGE = 50  # REST_FRAMEWORK PAGE_SIZE
EVENTS_PAGE = 500  # the events action's default limit


def endpoints(data) -> dict[str, str]:
    return {
        "nodes list": "/api/nodes/",
        "node detail": f"/api/nodes/{data.node_id}/",
        "npus list": "/api/npus/",
        "deployments list": "/api/deployments/",
        "deployment detail": f"/api/deployments/{data.deployment_id}/",
        "topology snapshot": f"/api/deployments/{data.deployment_id}/topology/",
        "jobs list": "/api/jobs/",
        "job detail": f"/api/jobs/{data.job_id}/",
        "job events": f"/api/jobs/{data.job_id}/events/",
        "eval runs list": "/api/evals/runs/",
    }


def assert_paginated(base: str, headers: dict, name: str, path: str, total: int, page: int = PAGE) -> None:
    import requests

    body = requests.get(base + path, headers=headers, timeout=60).json()
    assert body["count"] == total, (name, body["count"], total)
    assert len(body["results"]) == min(page, total), (name, len(body["results"]))
    assert (body["next"] is not None) == (total > page), name
    huge = requests.get(base + path + "?limit=100000", headers=headers, timeout=60).json()
    assert len(huge["results"]) <= 500, (name, "a client's limit is capped", len(huge["results"]))


def test_list_and_detail_endpoints_under_sustained_load(tmp_path, figure):
    import requests
    from rest_framework.authtoken.models import Token

    from apps.deployments.models import Deployment
    from apps.evals.models import EvalRun
    from apps.inventory.models import Node, Npu
    from apps.jobs.models import Job, JobEvent

    started = time.monotonic()
    sizes = Sizes()
    data = build_dataset(sizes)
    build_s = time.monotonic() - started
    assert (Node.objects.count(), Npu.objects.count(), Deployment.objects.count(), Job.objects.count(),
            JobEvent.objects.count()) == (sizes.nodes, sizes.npus, sizes.deployments, sizes.jobs, sizes.events)
    headers = {"Authorization": f"Token {Token.objects.create(user=data.user).key}"}

    web, port = start_daphne(stack_env(DEBUG="0"), tmp_path / "web.log")
    base = f"http://127.0.0.1:{port}"
    table = {}
    try:
        totals = {"nodes list": Node.objects.count(), "npus list": Npu.objects.count(),
                  "deployments list": Deployment.objects.count(), "jobs list": Job.objects.count(),
                  "eval runs list": EvalRun.objects.count()}
        paths = endpoints(data)
        for name, total in totals.items():
            assert_paginated(base, headers, name, paths[name], total)
        assert_paginated(base, headers, "job events", paths["job events"],
                         JobEvent.objects.filter(job_id=data.job_id).count(), EVENTS_PAGE)
        for name, path in paths.items():
            assert requests.get(base + path, headers=headers, timeout=60).status_code == 200  # warm: caches, imports
            cpu_before = cpu_seconds(web.pid)
            with ConnectionPeak() as connections:
                result = sustained_get(base + path, headers=headers, clients=CLIENTS, seconds=SECONDS)
            row = result.row()
            row["daphne_cpu_percent"] = round(100 * (cpu_seconds(web.pid) - cpu_before) / result.seconds)
            row["db_connections_peak"] = connections.peak
            table[name] = row
            assert result.errors == 0, (name, result.first_error)
            assert result.requests > CLIENTS, (name, row)
            # at most one per request in flight (+ this test's two): none left behind by finished requests
            assert connections.peak <= CLIENTS + 2, (name, row)
    finally:
        stop(web)
    print_table(table)

    slowest = max(table, key=lambda n: table[n]["p99_ms"])
    figure("rest-api-load",
           held=f"{len(table)} endpoints x {CLIENTS} token clients x {SECONDS:.0f} s each against one daphne on "
                "PostgreSQL: every answer a 200; every list a page (count = rows, 50 per page, ?limit capped at 500); "
                "database connections never above the requests in flight",
           figure=f"{sum(r['requests'] for r in table.values())} requests, 0 errors; req/s from "
                  f"{min(r['rps'] for r in table.values())} to {max(r['rps'] for r in table.values())}; "
                  f"slowest p99 {table[slowest]['p99_ms']} ms ({slowest}); "
                  f"{max(r['db_connections_peak'] for r in table.values())} database connections at most",
           command='make reliability PYTEST_ARGS="-k rest_api_load"',
           values={"endpoints": table, "clients": CLIENTS, "seconds_per_endpoint": SECONDS,
                   "dataset": vars(sizes), "dataset_build_s": round(build_s, 1)})


def print_table(table: dict) -> None:
    print(f"\n{'endpoint':20} {'requests':>8} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} "
          f"{'max bytes':>9} {'cpu %':>5} {'db conns':>8}")
    for name, r in table.items():
        print(f"{name:20} {r['requests']:8} {r['rps']:7} {r['p50_ms']:8} {r['p99_ms']:8} {r['errors']:6} "
              f"{r['max_bytes']:9} {r['daphne_cpu_percent']:5} {r['db_connections_peak']:8}")
