"""Fixtures of the eval page and websocket tests: a simulated deployment on the reference cluster (ref_cluster and
the vllm-ascend `deployment` come from tests/evals/conftest.py), logged-in browsers by role, and eval runs made
directly with stored results (no AISBench, no Celery)."""

import copy
import itertools

import pytest

from tests.evals.pages.stored_results import PERF_PERCENTILES, PERF_REQUESTS, PERF_SUMMARY


@pytest.fixture(autouse=True)
def no_celery_and_own_cache(monkeypatch, settings, tmp_path, own_cache_prefix):
    """Jobs are never sent to a broker; run folders live in this test's tmp dir; the AISBench install check (cached
    per test) finds nothing installed at once instead of starting an interpreter; test users are made fast."""
    from apps.jobs import tasks

    monkeypatch.setattr(tasks.run_job_task, "apply_async", lambda *a, **k: None)
    settings.PDCP_EVALS_DIR = tmp_path / "evals"
    settings.PDCP_AISBENCH = str(tmp_path / "not-installed" / "ais_bench")
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # users log in with force_login


@pytest.fixture
def browser_for(make_user):
    """A logged-in browser of a user of its own with the given role."""
    from django.test import Client

    serial = itertools.count(1)

    def login(role, **client_kwargs):
        client = Client(**client_kwargs)
        client.force_login(make_user(role, username=f"web-{role}-{next(serial)}"))
        return client

    return login


@pytest.fixture
def sim_deployment(ref_cluster, make_user):
    """The new-deployment template: launch_profile sim, so runs default to the simulated model's tokenizer."""
    from apps.deployments.services import deployment_create
    from apps.deployments.views import NEW_TEMPLATE

    return deployment_create(name="simref", cluster=ref_cluster, user=make_user("operator", "sim-owner"),
                             yaml_text=NEW_TEMPLATE)


@pytest.fixture
def make_run(sim_deployment):
    from apps.evals.models import EvalRun

    def make(deployment=None, **fields):
        deployment = deployment or sim_deployment
        revision = deployment.active_revision
        values = {"deployment": deployment, "deployment_name": deployment.name, "revision": revision,
                  "revision_number": revision.number, "revision_spec": copy.deepcopy(revision.spec),
                  "endpoint_url": "http://127.0.10.234:1999/", "served_model": "qwen3-235b", "simulated": True,
                  "mode": "both", "dataset_key": "catalogue:made-up-aime", "dataset_abbr": "made_up_aime",
                  "dataset_family": "aime", "status": "succeeded", "progress_done": 3, "progress_total": 3}
        values.update(fields)
        return EvalRun.objects.create(**values)

    return make


@pytest.fixture
def finished_run(make_run):
    """A "both" run with accuracy (2 of 3 right) and performance results stored, as results.py stores them."""
    from apps.evals.models import EvalSample

    run = make_run(accuracy=66.67, accuracy_detail={"made_up_aime": {"accuracy": 66.67, "correct": 2, "total": 3,
                                                                     "failed": 0}},
                   perf_summary=PERF_SUMMARY, perf_percentiles=PERF_PERCENTILES, perf_requests=PERF_REQUESTS,
                   timestamps={"accuracy": "20261201_101500"}, phase="done")
    for i, (answer, correct) in enumerate((("7", True), ("12", False), ("99", True))):
        EvalSample.objects.create(run=run, index=i, question=f"Question number {i}: what is {answer}?",
                                  prediction=f"Thinking... \\boxed{{{answer}}} PREDICTION-{i}", extracted=answer,
                                  reference="7" if i == 0 else "13" if i == 1 else "99", correct=correct)
    return run
