"""The advisor over runs whose files had other percentile columns than the statistic picked (P95 only): p50 and p95
can be picked, and a run lacking the statistic is not judged and says which it has, on the page and in the API;
never a 500, never read as 0."""

import re

import pytest
from django.test import Client

from tests.evals.advisor_runs import spec_with

pytestmark = pytest.mark.django_db

API = "/api/evals/advisor/"
ONE_P_ONE_D = spec_with([(8, 1)], [(4, 4)])  # 24 NPUs


@pytest.fixture
def p95_run():
    """A succeeded performance run whose latency table had avg, P50 and P95 columns only."""
    from apps.evals.models import EvalRun

    return EvalRun.objects.create(
        deployment_name="lab", revision_number=1, revision_spec=ONE_P_ONE_D, endpoint_url="http://127.0.10.85:1999/",
        served_model="qwen3-235b", mode="performance", dataset_key="catalogue:made-up-aime",
        dataset_abbr="made_up_aime", dataset_family="aime", max_out_len=512, concurrency=8, status="succeeded",
        perf_summary={"output_token_throughput": 2400.0, "request_throughput": 2.0},
        perf_percentiles={"TTFT": {"unit": "ms", "avg": 250.0, "p50": 240.0, "p95": 400.0, "n": 6},
                          "TPOT": {"unit": "ms", "avg": 30.0, "p50": 29.0, "p95": 45.0, "n": 6}})


def test_the_api_says_the_run_lacks_p90_and_judges_it_at_p95(api_client_for, p95_run):
    viewer = api_client_for("viewer")
    at_p90 = viewer.get(API, {"ttft_ms": "500", "tpot_ms": "50", "stat": "p90"})
    assert at_p90.status_code == 200, at_p90.content
    body = at_p90.json()
    [point] = body["layouts"][0]["runs"]
    assert point["run"] == p95_run.pk and point["meets"] is None and point["ttft_ms"] is None
    assert point["misses"][0] == "TTFT p90 not in this run's results (it has mean, median, p50, p95)"
    assert body["recommendation"] is None and f"Not judged: #{p95_run.pk}" in body["advice"]
    at_p95 = viewer.get(API, {"ttft_ms": "500", "tpot_ms": "50", "stat": "p95"}).json()
    assert at_p95["recommendation"]["best"]["run"] == p95_run.pk and at_p95["recommendation"]["best"]["ttft_ms"] == 400.0


def test_the_page_offers_p50_and_p95_and_shows_why_a_run_is_not_judged(make_user, p95_run):
    client = Client()
    client.force_login(make_user("viewer", username="advisor-viewer"))
    response = client.get("/evals/advisor/", {"ttft_ms": "500", "stat": "p90"})
    assert response.status_code == 200
    html = response.content.decode()
    assert '<option value="p50"' in html and '<option value="p95"' in html
    row = re.search(rf'<tr data-run="{p95_run.pk}">(.*?)</tr>', html, re.S).group(1)
    assert "not judged" in row and "TTFT p90 not in this run&#x27;s results (it has mean, median, p50, p95)" in row
    assert "—" in row and ">0.0<" not in row
