"""A sweep's runs go one after another: each starts when the one before ends; a cancel stops the series."""

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(monkeypatch):
    from apps.jobs import tasks

    sent = []
    monkeypatch.setattr(tasks.run_job_task, "apply_async", lambda args, **kw: sent.append(args[0]))
    return sent


def _sweep(deployment, evals_dir, django_capture_on_commit_callbacks, points=(1, 2, 4)):
    from apps.evals.services import eval_sweep_create

    with django_capture_on_commit_callbacks(execute=True):
        return eval_sweep_create(deployment=deployment, user=deployment.created_by, concurrencies=list(points),
                                 settings={"dataset": "catalogue:made-up-aime", "tokenizer_path": "/opt/tok"})


def _end(run, status):
    from apps.evals.models import EvalRun

    EvalRun.objects.filter(pk=run.pk).update(status=status)
    run.refresh_from_db()


def test_the_next_run_starts_when_one_ends(deployment, evals_dir, queued, django_capture_on_commit_callbacks):
    from apps.evals.services import start_next_in_sweep

    sweep = _sweep(deployment, evals_dir, django_capture_on_commit_callbacks)
    first, second, third = sweep.runs.order_by("concurrency")
    assert [first.job_id is not None, second.job_id, third.job_id] == [True, None, None]
    assert queued == [first.job_id]
    _end(first, "failed")  # a failed point does not stop the series
    with django_capture_on_commit_callbacks(execute=True):
        assert start_next_in_sweep(first) == second
    second.refresh_from_db()
    assert second.job_id and queued == [first.job_id, second.job_id]


def test_a_canceled_run_cancels_the_rest(deployment, evals_dir, queued, django_capture_on_commit_callbacks):
    from apps.evals.services import eval_cancel

    sweep = _sweep(deployment, evals_dir, django_capture_on_commit_callbacks)
    first, second, third = sweep.runs.order_by("concurrency")
    with django_capture_on_commit_callbacks(execute=True):
        eval_cancel(run=first, user=deployment.created_by)  # never claimed by a worker: ends here
    statuses = list(sweep.runs.order_by("concurrency").values_list("status", flat=True))
    assert statuses == ["canceled", "canceled", "canceled"]
    assert queued == [first.job_id]


def test_a_waiting_run_can_be_canceled_alone(deployment, evals_dir, queued, django_capture_on_commit_callbacks):
    from apps.evals.services import eval_cancel

    sweep = _sweep(deployment, evals_dir, django_capture_on_commit_callbacks)
    first, second, third = sweep.runs.order_by("concurrency")
    eval_cancel(run=third, user=deployment.created_by)
    third.refresh_from_db()
    first.refresh_from_db()
    assert (third.status, first.status) == ("canceled", "pending")
    assert "before it started" in third.explanation


def test_a_run_whose_worker_died_fails_and_its_sweep_goes_on(deployment, evals_dir, queued,
                                                             django_capture_on_commit_callbacks):
    from datetime import timedelta

    from django.utils import timezone

    from apps.evals.models import EvalRun
    from apps.jobs.models import Job
    from apps.jobs.services import sweep_orphaned_jobs

    sweep = _sweep(deployment, evals_dir, django_capture_on_commit_callbacks, points=(1, 2))
    first, second = sweep.runs.order_by("concurrency")
    EvalRun.objects.filter(pk=first.pk).update(status="running")
    Job.objects.filter(pk=first.job_id).update(status="running", worker="elsewhere:1",
                                               heartbeat=timezone.now() - timedelta(hours=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert sweep_orphaned_jobs() == [first.job_id]
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == "failed" and "worker running it" in first.explanation
    assert second.job_id and queued[-1] == second.job_id
