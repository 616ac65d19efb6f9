"""No N+1 in the REST API's lists: each list endpoint answers with the same number of SQL queries for a few rows
and for several times as many (all on one page), so a page of 50 costs what a page of 5 does."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from tests.reliability.api_dataset import Sizes, build_dataset

pytestmark = pytest.mark.django_db

FEW = Sizes(clusters=2, nodes=6, npus=64, deployments=4, revisions_per_deployment=2, processes_per_deployment=2,
            jobs=4, events=16, runs=4)
MANY = Sizes(clusters=20, nodes=40, npus=480, deployments=40, revisions_per_deployment=2,
             processes_per_deployment=2, jobs=40, events=1600, runs=40)
LISTS = ("/api/clusters/", "/api/nodes/", "/api/npus/", "/api/deployments/", "/api/revisions/", "/api/processes/",
         "/api/jobs/", "/api/jobs/{job}/events/", "/api/evals/runs/")
WHOLE = "?limit=500"  # every row on one page


def _counts(sizes: Sizes) -> dict[str, tuple[int, int]]:
    """{endpoint: (rows answered, queries)} on a dataset of `sizes`, rolled back afterwards."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    out = {}
    with transaction.atomic():
        data = build_dataset(sizes)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=data.user).key}")
        for path in LISTS:
            url = path.format(job=data.job_id) + WHOLE
            client.get(url)  # warm: content types, role groups and the like are cached per process
            with CaptureQueriesContext(connection) as queries:
                response = client.get(url)
            assert response.status_code == 200, (url, response.content[:300])
            out[path] = (len(response.json()["results"]), len(queries.captured_queries))
        transaction.set_rollback(True)
    return out


def test_list_endpoints_cost_the_same_queries_for_few_and_many_rows(settings, own_cache_prefix, figure):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    few, many = _counts(FEW), _counts(MANY)
    for path in LISTS:
        assert many[path][0] >= 5 * few[path][0], (path, few[path], many[path])  # the larger set really is larger
    grown = {path: (few[path], many[path]) for path in LISTS if many[path][1] != few[path][1]}
    assert not grown, f"query count grows with the rows (N+1): {grown}"
    table = {path: {"rows_few": few[path][0], "rows_many": many[path][0], "queries": many[path][1]} for path in LISTS}
    figure("api-list-query-counts",
           held="each list endpoint's SQL query count is the same for a few rows and for ~10x as many",
           figure="; ".join(f"{p}: {v['queries']} queries for {v['rows_few']} or {v['rows_many']} rows"
                            for p, v in table.items()),
           command='make test PYTEST_ARGS="tests/reliability/test_api_query_counts.py"', values=table)
