"""Issue 10's finish line, in a real browser: an operator starts an accuracy run from the deployment page, watches
the bar move, reads the score, and compares it with an earlier run on another revision of the topology."""

import re
from pathlib import Path

import pytest

from simcluster.engine.answers import book_path, expected_correct, load_book
from tests.deployments.simdeploy import log_tails, topology_yaml

pytestmark = [pytest.mark.procs,
              pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(400)]
BOOK = load_book(book_path("made-up-aime"))


def _yaml(run_dir: str, accuracy: float) -> str:
    """Time scale 0.2: the run the browser watches is slow enough to see its bar move."""
    def edit(data):
        data["simulation"] = {"answer_book": "made-up-aime", "accuracy": accuracy, "think": True}
        for inst in data["instances"]:
            inst["env"]["SIMCLUSTER_TIME_SCALE"] = "0.2"

    return topology_yaml(run_dir, edit=edit)


def _run_now(job):
    from apps.jobs.models import Job
    from apps.jobs.runner import run_job

    run_job(job.pk)
    job = Job.objects.get(pk=job.pk)
    assert job.status == "successful", job.explanation


@pytest.fixture
def earlier_run(sim, run_dir, monkeypatch, settings, tmp_path):
    """Revision 1 (the model right 70% of the time) with its score imported as AISBench would write it (what our
    own runs measure is tested in tests/evals/test_eval_runs_sim.py; an import spares an ais_bench run); then
    revision 2 (40%) deployed, which the browser evaluates."""
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role
    from apps.deployments.services import (
        deployment_create,
        deployment_deploy,
        deployment_stop,
        revision_create,
    )
    from apps.evals.execution import MODEL_ABBR
    from apps.evals.run_import import ImportTarget, eval_import
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import
    from apps.jobs import tasks

    inventory_import(Path(sim["inventory"]).read_text(), allow_key_files=True)
    operator = get_user_model().objects.create_user("ops", password="e2e-password-123")
    set_role(operator, Role.OPERATOR)
    deployment = deployment_create(name="reference-sim", cluster=Cluster.objects.get(name="reference"),
                                   user=operator, yaml_text=_yaml(run_dir, 0.7))
    score = 100 * len(expected_correct(BOOK, 0.7)) / len(BOOK)
    first = eval_import(user=operator, target=ImportTarget(deployment=deployment, dataset_key="catalogue:made-up-aime"),
                        name="summary_20261207_120000.csv",
                        data=f"dataset,version,metric,mode,{MODEL_ABBR}\nmade_up_aime,0a1b2c,accuracy,gen,{score:.2f}\n"
                        .encode())
    assert first.status == "succeeded" and first.revision_number == 1, first.explanation
    revision_create(deployment=deployment, user=operator, yaml_text=_yaml(run_dir, 0.4), activate=True)
    with monkeypatch.context() as m:
        m.setattr(tasks.run_job_task, "apply_async", lambda *a, **k: None)
        _run_now(deployment_deploy(deployment=deployment, user=operator, params={"health_timeout": 60}))
    yield deployment, first
    with monkeypatch.context() as m:
        m.setattr(tasks.run_job_task, "apply_async", lambda *a, **k: None)
        _run_now(deployment_stop(deployment=deployment, user=operator, params={"stop_grace": 3}))


def test_operator_runs_an_accuracy_eval_watches_it_and_compares_two_revisions(earlier_run, live_stack, browser,
                                                                              tmp_path, run_dir):
    from playwright.sync_api import expect

    from apps.evals.models import EvalRun

    deployment, first = earlier_run
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{live_stack}/login/")
    page.fill("input[name=username]", "ops")
    page.fill("input[name=password]", "e2e-password-123")
    page.click("button[type=submit]")

    page.goto(f"{live_stack}/deployments/{deployment.pk}/")
    page.click("#evaluate-link")
    page.select_option("#id_dataset", "catalogue:made-up-aime")
    page.select_option("#id_mode", "accuracy")
    page.fill("#id_num_warmups", "0")
    page.fill("#id_max_out_len", "512")
    page.fill("#id_concurrency", "4")
    page.click("button:text('Start the evaluation')")
    page.wait_for_url(re.compile(r"/evals/\d+/$"))
    page.wait_for_selector("#ws-state:text('live')", timeout=30000)

    # the bar moves: some requests answered while the run is still going
    expect(page.locator("#progress-count")).to_have_text(re.compile(r"^([1-9]\d*) / 21$"), timeout=120000)
    moving = page.locator("#progress-fill").get_attribute("style")
    page.screenshot(path=str(tmp_path / "eval-running.png"), full_page=True)
    try:
        expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=240000)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{log_tails(run_dir)}") from None
    assert moving != "width: 100%"

    run = EvalRun.objects.exclude(pk=first.pk).get()
    expected = 100 * len(expected_correct(BOOK, 0.4)) / len(BOOK)
    assert run.revision_number == 2 and run.accuracy == pytest.approx(expected, abs=0.01)
    # the page reloads itself when the run finishes (eval-live.js); a reload of ours could race it
    expect(page.locator("#accuracy-value")).to_have_text(f"{expected:.2f}%", timeout=30000)
    expect(page.locator("#simulated-note")).to_be_visible()

    page.goto(f"{live_stack}/evals/")
    page.check(f"input[name=runs][value='{first.pk}']")
    page.check(f"input[name=runs][value='{run.pk}']")
    page.click("button:text('Compare the picked runs')")
    page.wait_for_url(re.compile(r"/evals/compare/"))
    body = page.locator("body")
    expect(body).to_contain_text("simulation.accuracy")
    assert page.locator("td.regression").count() >= 1  # the lower accuracy is highlighted
    page.screenshot(path=str(tmp_path / "eval-compare.png"), full_page=True)
