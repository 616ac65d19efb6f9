"""Fixed output length on the pages: the launch form's checkbox (off by default, refused for accuracy on its field),
the sweep form's (on by default), and where a run's settings are shown (run page, list, compare, sweep page)."""

import re

import pytest

from apps.evals.models import EvalRun, EvalSweep
from apps.evals.run_settings import FIXED_LENGTH_ACCURACY
from tests.evals.pages.stored_results import PERF_PERCENTILES, PERF_SUMMARY

pytestmark = pytest.mark.django_db

LAUNCH = {"dataset": "catalogue:made-up-aime", "mode": "performance", "api_style": "chat", "stream": "on",
          "max_out_len": "1500", "concurrency": "2", "request_rate": "0", "temperature": "0.6", "num_prompts": "5",
          "num_warmups": "0", "tokenizer_path": "", "time_limit_s": "600"}
SWEEP = {k: v for k, v in LAUNCH.items() if k not in ("mode", "concurrency")}


def checkbox(html: str) -> str:
    match = re.search(r'<input type="checkbox" name="ignore_eos" id="id_ignore_eos"[^>]*>', html)
    assert match, "no ignore_eos checkbox"
    return match.group(0)


def field_error(html: str, name: str) -> str:
    match = re.search(rf'<span class="field-error" id="err_{name}">(.*?)</span>', html, re.S)
    return match.group(1) if match else ""


def test_the_launch_form_offers_it_unticked_and_a_performance_run_keeps_it(browser_for, sim_deployment):
    client = browser_for("operator")
    form = client.get(f"/evals/new/?deployment={sim_deployment.pk}").content.decode()
    assert "checked" not in checkbox(form) and "Fixed output length (ignore EOS)" in form
    response = client.post("/evals/new/", {**LAUNCH, "deployment": sim_deployment.pk, "ignore_eos": "on"})
    run = EvalRun.objects.get()
    assert response.status_code == 302 and (run.mode, run.ignore_eos, run.max_out_len) == ("performance", True, 1500)
    client.post("/evals/new/", {**LAUNCH, "deployment": sim_deployment.pk})
    assert EvalRun.objects.exclude(pk=run.pk).get().ignore_eos is False


def test_an_accuracy_run_with_a_fixed_output_length_is_refused_on_the_checkbox(browser_for, sim_deployment):
    page = browser_for("operator").post("/evals/new/", {**LAUNCH, "deployment": sim_deployment.pk,
                                                        "mode": "accuracy", "ignore_eos": "on"})
    assert page.status_code == 400
    html = page.content.decode()
    assert field_error(html, "ignore_eos") == FIXED_LENGTH_ACCURACY.replace("'", "&#x27;")
    assert "checked" in checkbox(html) and 'aria-invalid="true"' in checkbox(html)  # kept as ticked
    assert "<code>ignore_eos</code>" not in html and not EvalRun.objects.exists()


def test_the_sweep_form_ticks_it_by_default_and_unticked_means_off(browser_for, sim_deployment):
    client = browser_for("operator")
    form = client.get(f"/evals/sweeps/new/?deployment={sim_deployment.pk}").content.decode()
    assert "checked" in checkbox(form)
    client.post("/evals/sweeps/new/", {**SWEEP, "deployment": sim_deployment.pk, "concurrencies": "1,2",
                                       "ignore_eos": "on"})
    client.post("/evals/sweeps/new/", {**SWEEP, "deployment": sim_deployment.pk, "concurrencies": "1,2"})
    fixed, natural = EvalSweep.objects.order_by("pk")
    assert {r.ignore_eos for r in fixed.runs.all()} == {True} and {r.ignore_eos for r in natural.runs.all()} == {False}
    page = client.get(f"/evals/sweeps/{fixed.pk}/").content.decode()
    assert "output fixed at 1500 tokens (ignore EOS)" in page
    assert "output up to 1500 tokens" in client.get(f"/evals/sweeps/{natural.pk}/").content.decode()


def test_the_run_page_list_and_compare_show_the_output_length(browser_for, make_run):
    fixed = make_run(mode="both", ignore_eos=True, max_out_len=1500, perf_summary=PERF_SUMMARY,
                     perf_percentiles=PERF_PERCENTILES)
    natural = make_run(mode="performance", max_out_len=1500, perf_summary=PERF_SUMMARY,
                       perf_percentiles=PERF_PERCENTILES)
    client = browser_for("viewer")
    page = client.get(f"/evals/{fixed.pk}/").content.decode()
    assert '<span class="tag" id="output-length">fixed output 1500 tokens (ignore EOS, performance pass)</span>' in page
    page = client.get(f"/evals/{natural.pk}/").content.decode()
    assert '<span class="tag" id="output-length">max out 1500</span>' in page
    rows = client.get("/evals/").content.decode()
    fixed_row = re.search(rf'<tr data-run="{fixed.pk}">(.*?)</tr>', rows, re.S).group(1)
    natural_row = re.search(rf'<tr data-run="{natural.pk}">(.*?)</tr>', rows, re.S).group(1)
    assert "fixed out" in fixed_row and "fixed out" not in natural_row
    compare = client.get(f"/evals/compare/?runs={fixed.pk},{natural.pk}").content.decode()
    notes = re.search(r'<div class="flash warning" id="compare-notes">(.*?)</div>', compare, re.S).group(1)
    assert "fixed output length (ignore EOS)" in notes and "not comparable" in notes
    assert "· fixed output 1500" in compare and "· max out 1500" in compare
    same = make_run(mode="performance", ignore_eos=True, max_out_len=1500, perf_summary=PERF_SUMMARY)
    assert 'id="compare-notes"' not in client.get(f"/evals/compare/?runs={fixed.pk},{same.pk}").content.decode()
