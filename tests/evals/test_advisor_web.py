"""The P:D ratio advisor's page (/evals/advisor/) and API (/api/evals/advisor/) over runs in the database, whose
performance results the real parser stored (tests/evals/advisor_runs.py); roles; bad parameters are 400s naming
them."""

import json
import re

import pytest
from django.test import Client

from tests.api_schema_check import field_errors
from tests.evals.advisor_runs import measured_run, spec_with

pytestmark = pytest.mark.django_db

API = "/api/evals/advisor/"
PAGE = "/evals/advisor/"
TWO_P_ONE_D = spec_with([(8, 1), (8, 1)], [(4, 4)])  # 32 NPUs
ONE_P_ONE_D = spec_with([(8, 1)], [(4, 4)])  # 24 NPUs
TARGETS = {"ttft_ms": "500", "tpot_ms": "50", "stat": "p90"}


@pytest.fixture
def runs(tmp_path):
    """Two layouts of one workload measured at two concurrencies each, one run of another workload, a failed run
    and an accuracy run (neither counts), and a run whose spec copy gives no layout."""
    from apps.evals.models import EvalSweep

    sweep = EvalSweep.objects.create(deployment_name="two-p", concurrencies=[8, 32])
    made = {
        "2p_c8": measured_run(tmp_path, spec=TWO_P_ONE_D, throughput=2880, ttft_p90=300, tpot_p90=35,
                              concurrency=8, sweep=sweep, deployment_name="two-p"),  # 90/NPU, met
        "2p_c32": measured_run(tmp_path, spec=TWO_P_ONE_D, throughput=4800, ttft_p90=700, tpot_p90=48,
                               concurrency=32, sweep=sweep, deployment_name="two-p"),  # 150/NPU, TTFT missed
        "1p_c8": measured_run(tmp_path, spec=ONE_P_ONE_D, throughput=1920, ttft_p90=350, tpot_p90=30,
                              concurrency=8, deployment_name="one-p"),  # 80/NPU, met
        "1p_c16": measured_run(tmp_path, spec=ONE_P_ONE_D, throughput=2520, ttft_p90=480, tpot_p90=45,
                               concurrency=16, deployment_name="one-p", mode="both"),  # 105/NPU, met: the best
        "other": measured_run(tmp_path, spec=ONE_P_ONE_D, throughput=9999, ttft_p90=10, tpot_p90=1,
                              max_out_len=2048),
        "unreadable": measured_run(tmp_path, spec={"instances": [{"role": "prefill", "tp": 8}]},
                                   throughput=2000, ttft_p90=100, tpot_p90=10, deployment_name="old"),
        "failed": measured_run(tmp_path, spec=ONE_P_ONE_D, throughput=9999, ttft_p90=1, tpot_p90=1,
                               status="failed"),
        "accuracy": measured_run(tmp_path, spec=ONE_P_ONE_D, throughput=9999, ttft_p90=1, tpot_p90=1,
                                 mode="accuracy"),
    }
    return made


def browser(make_user, role):
    client = Client()
    client.force_login(make_user(role, username=f"web-{role}"))
    return client


def test_the_parser_stored_what_the_advisor_reads(runs):
    run = runs["1p_c16"]
    assert run.perf_summary["output_token_throughput"] == pytest.approx(2520)
    assert run.perf_percentiles["TTFT"]["p90"] == pytest.approx(480) and run.perf_percentiles["TTFT"]["unit"] == "ms"
    assert run.perf_percentiles["TPOT"]["p99"] == pytest.approx(45 * 1.3)
    assert run.perf_percentiles["InputTokens"]["avg"] == 16.0


def test_the_api_recommends_the_layout_with_the_most_throughput_per_npu_that_met_the_targets(api_client_for, runs):
    response = api_client_for("viewer").get(API, {**TARGETS, "group": "qwen3-235b|catalogue:made-up-aime|512"})
    assert response.status_code == 200, response.content
    body = response.json()
    best = runs["1p_c16"]
    rec = body["recommendation"]
    assert rec["layout"] == "1P(tp8 dp1) : 1D(tp4 dp4)" and rec["ratio_npus"] == "1:2" and rec["total_npus"] == 24
    assert rec["best"]["run"] == best.pk and rec["best"]["throughput_per_npu"] == pytest.approx(105.0)
    assert rec["best"]["concurrency"] == 16 and rec["best"]["ttft_ms"] == pytest.approx(480)
    assert rec["best"]["links"] == {"run": f"/api/evals/runs/{best.pk}/", "page": f"/evals/{best.pk}/",
                                    "sweep": None, "sweep_page": None}
    assert body["advice"].startswith("From 4 measured runs on 2 layouts: 1P(tp8 dp1) : 1D(tp4 dp4)")
    assert body["runs_considered"] == 4 and body["targets"] == {"ttft_ms": 500.0, "tpot_ms": 50.0, "stat": "p90"}
    two_p = body["layouts"][1]
    assert two_p["layout"] == "2P(tp8 dp1) : 1D(tp4 dp4)" and two_p["ratio_instances"] == "2:1"
    assert two_p["best"]["run"] == runs["2p_c8"].pk and two_p["best"]["throughput_per_npu"] == pytest.approx(90.0)
    sweep = runs["2p_c8"].sweep_id
    assert two_p["best"]["links"]["sweep"] == f"/api/evals/sweeps/{sweep}/"
    assert two_p["best"]["links"]["sweep_page"] == f"/evals/sweeps/{sweep}/"
    missed = next(r for r in two_p["runs"] if r["run"] == runs["2p_c32"].pk)
    assert missed["meets"] is False and missed["misses"] == ["TTFT p90 700.0 ms > 500 ms (+40%)"]
    counted = {r["run"] for layout in body["layouts"] for r in layout["runs"]}
    assert counted == {runs[k].pk for k in ("2p_c8", "2p_c32", "1p_c8", "1p_c16")}
    assert body["unreadable"] == [{"run": runs["unreadable"].pk, "deployment_name": "old",
                                   "reason": "the spec has no decode instance",
                                   "links": {"run": f"/api/evals/runs/{runs['unreadable'].pk}/",
                                             "page": f"/evals/{runs['unreadable'].pk}/", "sweep": None,
                                             "sweep_page": None}}]
    assert body["group"]["key"] == "qwen3-235b|catalogue:made-up-aime|512" and body["group"]["runs"] == 5
    assert [g["key"] for g in body["groups"]] == ["qwen3-235b|catalogue:made-up-aime|512",
                                                  "qwen3-235b|catalogue:made-up-aime|2048"]


def test_tighter_targets_give_the_closest_miss_and_no_recommendation(api_client_for, runs):
    body = api_client_for("viewer").get(API, {"ttft_ms": "200", "tpot_ms": "50"}).json()
    assert body["recommendation"] is None
    assert body["advice"].startswith("No measured layout meets the target (TTFT p90 ≤ 200 ms and TPOT p90 ≤ 50 ms)")
    closest = body["layouts"][0]["closest_miss"]
    assert closest["run"] == runs["2p_c8"].pk and closest["misses"] == ["TTFT p90 300.0 ms > 200 ms (+50%)"]
    assert body["layouts"][1]["closest_miss"]["run"] == runs["1p_c8"].pk


def test_the_other_group_is_advised_on_its_own(api_client_for, runs):
    body = api_client_for("viewer").get(API, {**TARGETS, "group": "qwen3-235b|catalogue:made-up-aime|2048"}).json()
    assert body["runs_considered"] == 1 and body["recommendation"]["best"]["run"] == runs["other"].pk


@pytest.mark.parametrize(("query", "name"), [
    ({"ttft_ms": "soon"}, "ttft_ms"), ({"tpot_ms": "0"}, "tpot_ms"), ({"stat": "p42"}, "stat"),
    ({"group": "no-length"}, "group"), ({"group": "nobody|catalogue:x|1"}, "group"), ({"colour": "red"}, "colour"),
    ({"group": "qwen3-235b|catalogue:made-up-aime|fixed:512"}, "group"),  # its runs all stop where the model ends
    ({"group": "qwen3-235b|catalogue:made-up-aime|fixed:"}, "group")])
def test_a_bad_parameter_is_a_400_naming_it(api_client_for, runs, query, name):
    response = api_client_for("viewer").get(API, query)
    assert response.status_code == 400
    assert set(field_errors(response)) == {name}


def test_without_runs_the_api_says_so(api_client_for):
    body = api_client_for("viewer").get(API, TARGETS).json()
    assert body["layouts"] == [] and body["group"] is None and body["recommendation"] is None
    assert body["advice"].startswith("No measured runs to advise from")


def test_the_api_needs_a_login_and_any_role_reads(client, api_client_for):
    assert client.get(API).status_code == 401
    assert api_client_for(None).get(API).status_code == 403
    for role in ("viewer", "operator", "admin"):
        assert api_client_for(role).get(API).status_code == 200


def test_the_schema_documents_the_endpoint_and_its_parameters(api_client_for):
    import yaml

    schema = yaml.safe_load(api_client_for("admin").get("/api/schema/").content)
    get = schema["paths"]["/api/evals/advisor/"]["get"]
    params = {p["name"]: p for p in get["parameters"]}
    assert {"ttft_ms", "tpot_ms", "stat", "group"} <= set(params)
    assert params["stat"]["schema"]["enum"] == ["mean", "median", "p50", "p75", "p90", "p95", "p99"]
    assert set(get["responses"]) >= {"200", "400"}


def chart(html: str) -> dict:
    match = re.search(r'<script id="advisor-chart-data" type="application/json">(.*?)</script>', html, re.S)
    assert match
    return json.loads(match.group(1))


def test_the_page_shows_the_advice_the_layouts_and_links_every_figure_to_its_run(make_user, runs):
    page = browser(make_user, "viewer").get(PAGE, TARGETS)
    assert page.status_code == 200
    html = page.content.decode()
    advice = re.search(r'<div class="flash success" id="advice">(.*?)</div>', html, re.S).group(1)
    best = runs["1p_c16"]
    assert "From 4 measured runs on 2 layouts" in advice and f'href="/evals/{best.pk}/"' in advice
    assert "qwen3-235b · catalogue:made-up-aime · up to 512 tokens (5 runs)</option>" in html
    assert "output up to 512 tokens" in re.search(r'id="advisor-workload">(.*?)</p>', html, re.S).group(1)
    row = re.search(r'<tr data-layout="2P\(tp8 dp1\) : 1D\(tp4 dp4\)">(.*?)</tr>', html, re.S).group(1)
    assert f'href="/evals/{runs["2p_c8"].pk}/"' in row and f'href="/evals/sweeps/{runs["2p_c8"].sweep_id}/"' in row
    assert "90.00" in row and "16 + 16 = 32" in row and "badge green" in row
    for key in ("2p_c8", "2p_c32", "1p_c8", "1p_c16"):
        assert f'<tr data-run="{runs[key].pk}">' in html
    for key in ("other", "failed", "accuracy"):
        assert f'<tr data-run="{runs[key].pk}">' not in html
    unreadable = re.search(r'<ul class="plain" id="advisor-unreadable">(.*?)</ul>', html, re.S).group(1)
    assert f"run #{runs['unreadable'].pk}" in unreadable and "layout unreadable" in unreadable
    data = chart(html)
    assert data["ttft_target"] == 500.0 and data["tpot_target"] == 50.0 and data["stat"] == "p90"
    one_p = next(t for t in data["layouts"] if t["name"] == "1P(tp8 dp1) : 1D(tp4 dp4)")
    assert [(p["concurrency"], p["url"], p["meets"]) for p in one_p["points"]] == [
        (8, f"/evals/{runs['1p_c8'].pk}/", True), (16, f"/evals/{best.pk}/", True)]
    assert one_p["points"][1]["per_npu"] == pytest.approx(105.0)
    assert 'src="/static/js/eval-advisor.js"' in html and "cdn" not in html.lower()


def test_the_page_shows_a_bad_parameter_on_its_field_with_a_400(make_user, runs):
    page = browser(make_user, "viewer").get(PAGE, {"ttft_ms": "soon", "stat": "p42"})
    assert page.status_code == 400
    html = page.content.decode()
    assert re.search(r'id="err_ttft_ms">expected milliseconds above 0.*?&#x27;soon&#x27;</span>', html)
    assert 'id="err_stat">unknown statistic' in html and 'id="err_tpot_ms"' not in html


def test_the_evaluations_list_links_to_the_advisor_and_roles_are_checked(client, make_user):
    assert 'href="/evals/advisor/"' in browser(make_user, "viewer").get("/evals/").content.decode()
    assert client.get(PAGE).status_code == 302
    norole = Client()
    norole.force_login(make_user(None, username="nobody"))
    assert norole.get(PAGE).status_code == 403
    empty = browser(make_user, "operator").get(PAGE)
    assert empty.status_code == 200 and "No measured runs to advise from" in empty.content.decode()


@pytest.mark.parametrize("query", [{"group": "a|b|\x00"}, {"group": "|||"}, {"ttft_ms": "1e309"}, {"tpot_ms": "-inf"},
                                   {"stat": "\u00e9"}, {"ttft_ms": "\x00"}, {"group": "m|d|99999999999999999999999"}])
def test_odd_parameters_are_400s_never_500s(api_client_for, runs, query):
    response = api_client_for("viewer").get(API, query)
    assert response.status_code == 400, response.content
    assert set(field_errors(response)) == set(query)


def test_fixed_length_runs_are_a_group_of_their_own(api_client_for, runs, tmp_path):
    fixed = measured_run(tmp_path, spec=ONE_P_ONE_D, throughput=99999, ttft_p90=1, tpot_p90=1, ignore_eos=True)
    viewer = api_client_for("viewer")
    up_to = viewer.get(API, TARGETS).json()
    assert fixed.pk not in {p["run"] for la in up_to["layouts"] for p in la["runs"]}
    groups = {g["key"]: g for g in up_to["groups"]}
    assert groups["qwen3-235b|catalogue:made-up-aime|fixed:512"]["fixed_length"] is True
    assert groups["qwen3-235b|catalogue:made-up-aime|512"]["fixed_length"] is False
    alone = viewer.get(API, {**TARGETS, "group": "qwen3-235b|catalogue:made-up-aime|fixed:512"}).json()
    assert alone["runs_considered"] == 1 and alone["recommendation"]["best"]["run"] == fixed.pk
