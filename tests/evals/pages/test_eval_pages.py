"""Eval pages a viewer reads: the list, one run with its results and charts, compare, sweeps, datasets, the
deployment page's evaluations, the AISBench install banner; bad ids are 404 pages."""

import json
import re
import sys
import types

import pytest

from tests.evals.pages.stored_results import PERF_PERCENTILES, PERF_SUMMARY

pytestmark = pytest.mark.django_db


def json_script(html: str, element_id: str):
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', html, re.S)
    assert match, element_id
    return json.loads(match.group(1))


def test_the_nav_leads_to_the_list_of_runs_with_their_numbers(browser_for, finished_run, make_run, ref_cluster,
                                                             fixed_yaml):
    from apps.deployments.services import deployment_create
    from tests.deployments.second_site import on_new_nodes

    # simref holds node0's and node2's dies and the proxy's ports: the reference topology goes to nodes of its own
    deployment = deployment_create(name="reference", cluster=ref_cluster, user=None,
                                   yaml_text=on_new_nodes(ref_cluster, fixed_yaml))
    other = make_run(deployment=deployment, simulated=False, status="failed", accuracy=None, mode="accuracy")
    page = browser_for("viewer").get("/evals/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/evals/"' in html and 'href="/evals/datasets/"' in html and 'href="/evals/sweeps/"' in html
    row = re.search(rf'<tr data-run="{finished_run.pk}">(.*?)</tr>', html, re.S).group(1)
    assert "badge green" in row and "simref" in row and "r1" in row and "simulated" in row
    assert "66.67%" in row and "123.4" in row and "made_up_aime" in row and "Accuracy and performance" in row
    assert f'name="runs" value="{finished_run.pk}"' in row and 'form="compare-form"' in row
    assert f'<tr data-run="{other.pk}">' in html

    filtered = browser_for("viewer").get(f"/evals/?deployment={other.deployment_id}").content.decode()
    assert f'<tr data-run="{other.pk}">' in filtered and f'<tr data-run="{finished_run.pk}">' not in filtered


def test_the_list_pages_and_keeps_its_filter(browser_for, make_run, sim_deployment):
    for _ in range(51):
        make_run()
    html = browser_for("viewer").get(f"/evals/?deployment={sim_deployment.pk}").content.decode()
    assert "page 1 of 2" in html and f"?deployment={sim_deployment.pk}&amp;page=2" in html


def test_a_missing_aisbench_shows_a_banner_with_the_fix(browser_for):
    html = browser_for("viewer").get("/evals/").content.decode()
    banner = re.search(r'<div class="flash error" id="aisbench-problem">(.*?)</div>', html, re.S).group(1)
    assert "not installed" in banner and "make aisbench" in banner


@pytest.mark.parametrize("check, shown", [
    (lambda path: types.SimpleNamespace(ok=True, problem=""), None),
    (lambda path: types.SimpleNamespace(ok=False, problem="AISBench is broken: its import fails with numpy"),
     "its import fails with numpy"),
    (lambda path: 1 / 0, "could not be checked (ZeroDivisionError"),
])
def test_the_install_banner_says_what_the_check_found_and_never_fails_the_page(browser_for, monkeypatch, check,
                                                                               shown):
    monkeypatch.setitem(sys.modules, "apps.evals.aisbench.install", types.SimpleNamespace(check_install=check))
    page = browser_for("viewer").get("/evals/")
    assert page.status_code == 200
    html = page.content.decode()
    if shown is None:
        assert 'id="aisbench-problem"' not in html
    else:
        assert shown in html and "make aisbench" in html


def test_a_finished_run_page_shows_results_and_charts_without_a_socket(browser_for, finished_run):
    html = browser_for("viewer").get(f"/evals/{finished_run.pk}/").content.decode()
    assert "http://127.0.10.234:1999/" in html and "control plane" in html and "revision r1" in html
    assert "scores come from the simulator's answer book, not a real model" in html
    accuracy = re.search(r'<table class="table narrow-table" id="accuracy-table">(.*?)</table>', html, re.S).group(1)
    assert "made_up_aime" in accuracy and "66.67" in accuracy
    assert "PREDICTION-1" in html and "<details>" in html and "✓" in html and "✗" in html
    assert "Output token throughput" in html and "123.40" in html
    percentiles = re.search(r'id="percentiles">(.*?)</table>', html, re.S).group(1)
    assert "TTFT" in percentiles and "140" in percentiles and "149" in percentiles
    data = json_script(html, "run-chart-data")
    assert data["ttft"] == [100.0, 101.0, 102.0] and data["e2el"] == [900.0, 901.0, 902.0]
    assert data["timeline"][1] == {"i": 1, "start": 10.0, "e2el": 901.0, "ttft": 101.0, "ok": True}
    assert 'data-chart="latency"' in html and 'data-chart="timeline"' in html and "vendor/plotly.min.js" in html
    assert "eval-live.js" not in html
    assert 'id="cancel-form"' not in html and 'id="resume-form"' not in html


def test_a_running_run_page_goes_live_and_offers_cancel_to_operators(browser_for, make_run):
    run = make_run(status="running", progress_done=4, progress_total=10, phase="accuracy: running")
    html = browser_for("operator").get(f"/evals/{run.pk}/").content.decode()
    assert "eval-live.js" in html and 'data-finished="0"' in html and f'data-state-url="/evals/{run.pk}/state/"' in html
    assert "4 / 10" in html and 'style="width: 40%"' in html and 'id="cancel-form"' in html
    assert "csrfmiddlewaretoken" in html
    assert 'id="cancel-form"' not in browser_for("viewer").get(f"/evals/{run.pk}/").content.decode()
    state = browser_for("viewer").get(f"/evals/{run.pk}/state/").json()
    assert state["type"] == "eval" and state["done"] == 4 and state["total"] == 10 and state["finished"] is False


def test_a_failed_run_shows_why_its_log_tail_and_resume(browser_for, make_run):
    run = make_run(status="failed", explanation="accuracy run failed: the endpoint refused every request",
                   log_tail=["Traceback (most recent call last):", "ConnectionRefusedError: [Errno 111]"])
    html = browser_for("operator").get(f"/evals/{run.pk}/").content.decode()
    assert 'class="flash error">accuracy run failed: the endpoint refused every request' in html
    log = re.search(r'<pre class="log" id="log-tail">(.*?)</pre>', html, re.S).group(1)
    assert "Traceback (most recent call last):\nConnectionRefusedError: [Errno 111]\n" == log
    assert 'id="resume-form"' in html and 'id="cancel-form"' not in html


def test_wrong_only_shows_the_wrong_samples_and_pages_keep_the_filter(browser_for, finished_run):
    from apps.evals.models import EvalSample

    EvalSample.objects.bulk_create(EvalSample(run=finished_run, index=i, question=f"extra {i}", reference="1",
                                              correct=False) for i in range(3, 40))
    client = browser_for("viewer")
    everything = client.get(f"/evals/{finished_run.pk}/").content.decode()
    assert "all (40)" in everything and "wrong only (38)" in everything and 'data-index="0"' in everything
    wrong = client.get(f"/evals/{finished_run.pk}/?wrong=1").content.decode()
    assert 'data-index="0"' not in wrong and 'data-index="1"' in wrong and 'data-index="2"' not in wrong
    assert "?wrong=1&amp;page=2" in wrong
    second = client.get(f"/evals/{finished_run.pk}/?wrong=1&page=2").content.decode()
    rows = re.findall(r'<tr data-index="(\d+)" class="(\w+)"', second)
    assert len(rows) == 13 and {cls for _, cls in rows} == {"wrong"}


def test_compare_puts_the_baseline_first_and_marks_regressions(browser_for, finished_run, make_run):
    spec = dict(finished_run.revision_spec, proxy={**finished_run.revision_spec["proxy"], "policy": "round_robin"})
    slower = make_run(revision_spec=spec, revision_number=2, accuracy=33.33,
                      perf_summary={**PERF_SUMMARY, "output_token_throughput": 61.7},
                      perf_percentiles={**PERF_PERCENTILES, "TTFT": {**PERF_PERCENTILES["TTFT"], "p90": 280.0}})
    client = browser_for("viewer")
    picked = client.get(f"/evals/compare/?runs={slower.pk}&runs={finished_run.pk}")
    assert picked.status_code == 302 and picked["Location"] == f"/evals/compare/?runs={finished_run.pk},{slower.pk}"
    html = client.get(picked["Location"]).content.decode()
    table = re.search(r'id="compare-table-1">(.*?)</table>', html, re.S).group(1)
    assert table.index(f"#{finished_run.pk}") < table.index(f"#{slower.pk}") and "baseline" in table
    assert '<td class="num regression">61.70 <small class="delta">-50.0%</small>' in table
    assert '<td class="num regression">280 <small class="delta">+100.0%</small>' in table
    assert '<td class="num">123.40</td>' in table
    changes = re.search(r'id="topology-changes">(.*?)</ul>\n\n', html, re.S).group(1)
    assert "<code>proxy.policy</code>: least_conn → round_robin" in changes
    data = json_script(html, "compare-chart-data-1")
    assert data["accuracy"] == {"labels": ["Accuracy"], "values": [[66.67], [33.33]]}
    latency = data["percentiles"]
    assert latency["values"][1][latency["labels"].index("TTFT p90")] == 280.0


def test_compare_needs_two_runs(browser_for, finished_run):
    page = browser_for("viewer").get(f"/evals/compare/?runs={finished_run.pk}")
    assert page.status_code == 400 and "pick 2 to 8 runs" in page.content.decode()


@pytest.mark.parametrize("path", ["/evals/999999/", "/evals/999999/state/", "/evals/999999/download/",
                                  "/evals/compare/?runs=1,abc", "/evals/compare/?runs=999998,999999",
                                  "/evals/sweeps/999999/", "/evals/new/?deployment=999999",
                                  "/evals/new/?deployment=abc", "/evals/sweeps/new/?deployment=x"])
def test_bad_ids_are_404_pages(browser_for, path):
    page = browser_for("operator").get(path)
    assert page.status_code == 404 and "Not found" in page.content.decode()


def test_a_sweep_page_polls_while_a_run_is_unfinished_and_charts_each_point(browser_for, make_run, sim_deployment):
    from apps.evals.models import EvalSweep

    sweep = EvalSweep.objects.create(deployment=sim_deployment, deployment_name="simref", concurrencies=[1, 2])
    make_run(sweep=sweep, mode="performance", concurrency=1, perf_summary=PERF_SUMMARY,
             perf_percentiles=PERF_PERCENTILES)
    second = make_run(sweep=sweep, mode="performance", concurrency=2, status="running")
    client = browser_for("viewer")
    html = client.get(f"/evals/sweeps/{sweep.pk}/").content.decode()
    assert 'hx-trigger="every 2s"' in html and 'data-chart="sweep"' in html and "vendor/plotly.min.js" in html
    data = json_script(html, "sweep-chart-data")
    [line] = data["lines"]
    assert [(p["run"], p["concurrency"], p["throughput"], p["ttft"], p["ttft_stat"], p["tpot"])
            for p in line["points"]] == [(second.pk - 1, 1, 123.4, 140.0, "p90", 21.5)]
    assert data["ttft_title"] == "TTFT p90 (ms)" and [row["id"] for row in data["rows"]] == [second.pk - 1, second.pk]
    assert '140.0 <small class="muted sweep-stat">p90</small>' in html
    second.status = "succeeded"
    second.save()
    fragment = client.get(f"/evals/sweeps/{sweep.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.strip().startswith('<section id="sweep-runs">') and "<html" not in fragment
    assert "every 2s" not in fragment
    assert f'href="/evals/sweeps/{sweep.pk}/"' in client.get("/evals/sweeps/").content.decode()


def test_the_datasets_page_says_what_is_missing_and_where_it_goes(browser_for, settings):
    html = browser_for("viewer").get("/evals/datasets/").content.decode()
    made_up = re.search(r'<tr data-key="catalogue:made-up-aime">(.*?)</tr>', html, re.S).group(1)
    assert "ready" in made_up and "simulated only" in made_up
    aime = re.search(r'<tr data-key="catalogue:aime2025">(.*?)</tr>', html, re.S).group(1)
    assert "missing" in aime and f"{settings.PDCP_EVALS_DIR}/datasets/aime2025/aime2025.jsonl" in aime
    assert 'id="upload-form"' not in html  # viewers read, operators upload


def test_the_deployment_page_offers_evaluate_and_lists_its_runs(browser_for, sim_deployment, finished_run):
    html = browser_for("operator").get(f"/deployments/{sim_deployment.pk}/").content.decode()
    assert f'href="/evals/new/?deployment={sim_deployment.pk}"' in html and ">Evaluate</a>" in html
    recent = html[html.index('id="recent-evals"'):]
    assert f'<tr data-run="{finished_run.pk}">' in recent and "66.67%" in recent
    assert "Evaluate</a>" not in browser_for("viewer").get(f"/deployments/{sim_deployment.pk}/").content.decode()
