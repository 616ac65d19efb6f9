"""Compare over run.results: a table per dataset with a column per (run, model), every percentile column the files
had (p95 without p90), imported runs marked and without a topology; page and API. The sweep's chart and table
with p95-only runs. Runs are made directly with their results lists (no AISBench, no Celery)."""

import json
import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

API = "/api/evals/compare/"
GSM8K, AIME = "gsm8k", "aime2024"


def latency(**stats) -> dict:
    return {"unit": "ms", **stats, "n": 10}


def entry(model: str, dataset: str, *, score=None, scores=None, summary=None, percentiles=None) -> dict:
    """One (model, dataset) of run.results (apps/evals/results.py); its figures at the headline stage "total", and a
    "warmup" stage whose figures a comparison must never show."""
    accuracy = None
    if score is not None:
        accuracy = {"scores": scores or {"accuracy": score}, "counts": {}, "score": score, "correct": None,
                    "total": None, "failed": 0}
    performance = None
    if summary or percentiles:
        warmup = {"output_token_throughput": 1.0}
        performance = {"headline_stage": "total", "stages": ["total", "warmup"],
                       "summary": {"total": summary or {}, "warmup": warmup}, "metrics": {},
                       "percentiles": {"total": percentiles or {}, "warmup": {"TTFT": latency(p95=1.0)}}}
    return {"model": model, "dataset": dataset, "accuracy": accuracy, "performance": performance}


OURS = [entry("pdcp", GSM8K, score=85.0,
              summary={"output_token_throughput": 400.0, "request_throughput": 2.0, "requests_failed": 0},
              percentiles={"TTFT": latency(avg=100.0, median=95.0, p75=110.0, p90=120.0, p99=150.0)})]
IMPORTED = [
    entry("qwen-a", GSM8K, score=90.0, scores={"accuracy": 90.0, "pass@4": 96.5},
          summary={"output_token_throughput": 500.0, "request_throughput": 2.5, "requests_failed": 1},
          percentiles={"TTFT": latency(avg=80.0, p50=78.0, p95=210.0), "TPOT": latency(avg=20.0, p95=31.0)}),
    entry("qwen-b", GSM8K, score=80.0, summary={"output_token_throughput": 300.0}),
    entry("qwen-a", AIME, score=30.0),
    entry("qwen-b", AIME, score=20.0, scores={"accuracy": 20.0, "pass@4": 40.0}),
]


@pytest.fixture
def ours(deployment):
    """One of our runs: one model, one dataset, the spec of the deployment's active revision."""
    from apps.evals.models import EvalRun

    revision = deployment.active_revision
    return EvalRun.objects.create(
        deployment=deployment, deployment_name=deployment.name, revision=revision,
        revision_number=revision.number, revision_spec=revision.spec, endpoint_url="http://127.0.10.234:1999/",
        served_model="qwen3-235b", mode="both", dataset_key="catalogue:gsm8k", dataset_abbr=GSM8K,
        status="succeeded", concurrency=8, results=OURS)


@pytest.fixture
def imported():
    """An imported run of two models on two datasets, with no deployment and no topology."""
    from apps.evals.models import EvalRun

    return EvalRun.objects.create(
        deployment_name="external", revision_number=0, revision_spec={}, served_model="qwen-a", mode="both",
        dataset_key=f"imported:{GSM8K}", dataset_abbr=GSM8K, status="succeeded", source="imported",
        imported_from="outputs/20261201_101500.zip (output folder)", concurrency=8, results=IMPORTED)


def page(make_user, url: str) -> str:
    client = Client()
    client.force_login(make_user("viewer", username="compare-viewer"))
    response = client.get(url)
    assert response.status_code == 200, response.content
    return response.content.decode()


def tables_of(html: str) -> dict[str, str]:
    return dict(re.findall(r'<section class="compare-dataset" data-dataset="([^"]+)">(.*?)</section>', html, re.S))


def heads(table_html: str) -> list[str]:
    """Each column head as "#<run> <model>"."""
    return [f"#{run} {model}" for run, model in re.findall(
        r'<th>\s*<a href="/evals/(\d+)/">.*?<strong class="compare-model">([^<]*)</strong>', table_html, re.S)]


def row_cells(table_html: str, label: str) -> list[str]:
    row = re.search(rf'<tr><th scope="row">{re.escape(label)} .*?</tr>', table_html, re.S)
    assert row, label
    return re.findall(r'<td class="num[^"]*">(.*?)</td>', row.group(0))


def test_the_page_has_a_table_per_dataset_with_a_column_per_run_and_model(make_user, ours, imported):
    html = page(make_user, f"/evals/compare/?runs={ours.pk},{imported.pk}")
    tables = tables_of(html)
    assert list(tables) == [GSM8K, AIME]  # the order the runs first name them
    gsm8k, aime = tables[GSM8K], tables[AIME]
    assert heads(gsm8k) == [f"#{ours.pk} pdcp", f"#{imported.pk} qwen-a", f"#{imported.pk} qwen-b"]
    assert heads(aime) == [f"#{imported.pk} qwen-a", f"#{imported.pk} qwen-b"]
    assert row_cells(gsm8k, "Accuracy") == ["85", '90 <small class="delta">+5.9%</small>',
                                            '80 <small class="delta">-5.9%</small>']
    assert 'class="num regression">80' in gsm8k and "pass@4" in gsm8k
    assert row_cells(gsm8k, "pass@4") == ["—", "96.50", "—"]
    assert row_cells(gsm8k, "Output token throughput") == ["400", '500 <small class="delta">+25.0%</small>',
                                                           '300 <small class="delta">-25.0%</small>']
    # every stat any column has, avg and median first, then the percentiles ascending; "—" where one lacks it
    stats = re.findall(r'<th scope="row">TTFT (\w+) ', gsm8k)
    assert stats == ["avg", "median", "p50", "p75", "p90", "p95", "p99"]
    assert row_cells(gsm8k, "TTFT p95") == ["—", "210", "—"] and row_cells(gsm8k, "TTFT p90") == ["120", "—", "—"]
    # the aime table's baseline is its own first column: the imported run's first model
    assert row_cells(aime, "Accuracy") == ["30", '20 <small class="delta">-33.3%</small>']
    assert row_cells(aime, "pass@4") == ["—", "40"] and "TTFT" not in aime
    assert '<span class="badge grey">imported</span>' in gsm8k and "from outputs/20261201_101500.zip" in gsm8k
    assert "external r0" not in html
    changes = re.search(r'id="topology-changes">(.*?)</ul>', html, re.S).group(1)
    assert f"#{imported.pk}</a> (external)" in changes and "no topology recorded (external)" in changes
    assert "unreadable" not in changes and "different datasets" not in html
    charts = {chart["dataset"]: chart for chart in map(json.loads, re.findall(
        r'<script id="compare-chart-data-\d+" type="application/json">(.*?)</script>', html, re.S))}
    assert list(charts) == [GSM8K, AIME]
    gsm8k_chart = charts[GSM8K]
    assert gsm8k_chart["columns"][1].endswith("· qwen-a") and len(gsm8k_chart["columns"]) == 3
    p95 = gsm8k_chart["percentiles"]["labels"].index("TTFT p95")
    assert [column[p95] for column in gsm8k_chart["percentiles"]["values"]] == [None, 210.0, None]
    assert charts[AIME]["accuracy"] == {"labels": ["Accuracy", "pass@4"], "values": [[30.0, None], [20.0, 40.0]]}
    assert charts[AIME]["percentiles"] == {"labels": [], "values": [[], []]}
    assert html.count('data-chart="compare-percentiles"') == 2


def test_the_api_returns_the_tables_and_the_first_as_rows(api_client_for, ours, imported):
    response = api_client_for("viewer").get(API, {"runs": f"{imported.pk},{ours.pk}"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert [t["dataset"] for t in body["tables"]] == [GSM8K, AIME]
    gsm8k = body["tables"][0]
    assert [(c["run"], c["model"], c["imported"]) for c in gsm8k["columns"]] == [
        (imported.pk, "qwen-a", True), (imported.pk, "qwen-b", True), (ours.pk, "pdcp", False)]
    assert gsm8k["columns"][0]["imported_from"].startswith("outputs/") and gsm8k["columns"][2]["imported_from"] == ""
    assert body["rows"] == gsm8k["rows"]
    rows = {r["key"]: r for r in gsm8k["rows"]}
    assert rows["accuracy"]["values"] == [90.0, 80.0, 85.0] and rows["accuracy"]["regressions"] == [False, True, True]
    assert rows["score:pass@4"]["values"] == [96.5, None, None] and rows["score:pass@4"]["part"] == "accuracy"
    assert rows["TTFT.p95"]["values"] == [210.0, None, None] and rows["TTFT.p95"]["part"] == "latency"
    assert rows["TTFT.p90"]["deltas"] == [None, None, None] and rows["requests_failed"]["part"] == "summary"
    assert rows["output_token_throughput"]["deltas"] == [0.0, -40.0, -20.0]
    assert [r["key"] for r in gsm8k["rows"] if r["key"].startswith("TPOT")] == ["TPOT.avg", "TPOT.p95"]
    assert [c["model"] for c in body["tables"][1]["columns"]] == ["qwen-a", "qwen-b"]
    assert body["runs"][0]["source"] == "imported"
    change = body["topology_changes"][0]
    assert change["run"] == ours.pk and change["changes"] == []
    assert change["problem"] == f"the baseline #{imported.pk} has no topology recorded (external)"
    assert not any("datasets" in note for note in body["notes"])


def test_a_run_with_only_p95_compares_and_shows_its_p95(make_user, api_client_for, ours):
    from apps.evals.models import EvalRun

    p95_only = EvalRun.objects.create(
        deployment_name="lab", revision_number=0, revision_spec={}, mode="performance", dataset_abbr=GSM8K, status="succeeded",
        source="imported", concurrency=8, results=[entry("pdcp", GSM8K, summary={"output_token_throughput": 380.0},
                                                         percentiles={"TTFT": latency(p95=180.0)})])
    html = page(make_user, f"/evals/compare/?runs={ours.pk},{p95_only.pk}")
    table = tables_of(html)[GSM8K]
    assert row_cells(table, "TTFT p95") == ["—", "180"] and row_cells(table, "TTFT p99") == ["150", "—"]
    assert row_cells(table, "Accuracy") == ["85", "—"]
    body = api_client_for("viewer").get(API, {"runs": f"{p95_only.pk},{ours.pk}"}).json()
    rows = {r["key"]: r["values"] for r in body["rows"]}
    assert rows["TTFT.p95"] == [180.0, None] and rows["TTFT.p90"] == [None, 120.0]


def test_a_run_without_results_is_named_and_nothing_fails(make_user, ours):
    from apps.evals.models import EvalRun

    pending = EvalRun.objects.create(deployment_name="lab", revision_number=1, revision_spec={"instances": "broken"},
                                     mode="both", dataset_abbr=GSM8K, status="pending")
    html = page(make_user, f"/evals/compare/?runs={ours.pk},{pending.pk}")
    assert f"#{pending.pk} has no results to compare (pending)" in html
    assert heads(tables_of(html)[GSM8K]) == [f"#{ours.pk} pdcp"]
    assert "Only this run and model has this dataset" in html and "unreadable spec" in html


def run_of_sweep(pk: int, concurrency: int, results: list, status: str = "succeeded"):
    from apps.evals.models import EvalRun

    return EvalRun(pk=pk, concurrency=concurrency, status=status, results=results)


def test_the_sweep_chart_draws_a_line_per_model_at_p90_else_the_nearest_percentile():
    from apps.evals.charts import sweep_chart_data

    def point(model, throughput, ttft, tpot):
        return entry(model, GSM8K, summary={"output_token_throughput": throughput},
                     percentiles={"TTFT": latency(**ttft), "TPOT": latency(**tpot)})

    runs = [run_of_sweep(12, 4, [point("m1", 200.0, {"p95": 300.0, "p75": 250.0}, {"p95": 30.0}),
                                 point("m2", 180.0, {"p50": 100.0, "p99": 400.0}, {"median": 20.0})]),
            run_of_sweep(11, 1, [point("m1", 100.0, {"p85": 150.0, "p95": 190.0}, {"p95": 25.0})]),
            run_of_sweep(13, 8, [], status="running")]
    data = sweep_chart_data(runs)
    assert [line["name"] for line in data["lines"]] == ["m1", "m2"]
    m1, m2 = (line["points"] for line in data["lines"])
    assert [(p["run"], p["concurrency"], p["throughput"], p["ttft"], p["ttft_stat"]) for p in m1] == [
        (11, 1, 100.0, 190.0, "p95"), (12, 4, 200.0, 300.0, "p95")]  # as near: the higher
    assert (m2[0]["ttft"], m2[0]["ttft_stat"], m2[0]["tpot"], m2[0]["tpot_stat"]) == (400.0, "p99", 20.0, "median")
    assert data["ttft_title"] == "TTFT p95/p99 (ms; the stored percentile nearest p90)"
    assert data["tpot_title"] == "TPOT median/p95 (ms; the stored percentile nearest p90)"
    assert [row["id"] for row in data["rows"]] == [11, 12, 13] and len(data["rows"][1]["figures"]) == 2
    assert data["rows"][2]["figures"][0]["throughput"] is None
    json.dumps(data)  # embedded with json_script


def test_the_sweep_page_names_the_percentile_each_cell_shows(browser_for_sweep, sweep_with_p95_runs):
    html = browser_for_sweep.get(f"/evals/sweeps/{sweep_with_p95_runs.pk}/").content.decode()
    table = re.search(r'id="sweep-table">(.*?)</table>', html, re.S).group(1)
    assert '210.0 <small class="muted sweep-stat">p95</small>' in table
    assert '31.0 <small class="muted sweep-stat">p95</small>' in table and "p90" not in table
    data = json.loads(re.search(r'<script id="sweep-chart-data" type="application/json">(.*?)</script>', html,
                                re.S).group(1))
    assert data["ttft_title"] == "TTFT p95 (ms; the stored percentile nearest p90)"


@pytest.fixture
def browser_for_sweep(make_user):
    client = Client()
    client.force_login(make_user("viewer", username="sweep-viewer"))
    return client


@pytest.fixture
def sweep_with_p95_runs(deployment, imported):
    from apps.evals.models import EvalSweep

    sweep = EvalSweep.objects.create(deployment=deployment, deployment_name=deployment.name, concurrencies=[8])
    imported.sweep = sweep
    imported.results = IMPORTED[:1]
    imported.save()
    return sweep
