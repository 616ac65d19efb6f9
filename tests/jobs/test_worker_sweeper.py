"""Every worker sweeps orphaned jobs itself (apps/jobs/sweeper.py), so with beat down a job whose worker died on
another host still ends failed: once its heartbeat is older than the timeout, within one sweep period."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)


def test_sweep_period_is_half_the_timeout_within_1_to_60_s(settings):
    from apps.jobs.sweeper import sweep_seconds

    for timeout, period in ((60, 30), (8, 4), (1, 1), (600, 60)):
        settings.JOB_HEARTBEAT_TIMEOUT_SECONDS = timeout
        assert sweep_seconds() == period


def test_the_worker_sweeper_fails_a_silent_job_of_another_host_without_beat(node, settings):
    from apps.jobs.models import Job
    from apps.jobs.services import job_transition
    from apps.jobs.sweeper import JobSweeper

    settings.JOB_HEARTBEAT_TIMEOUT_SECONDS = 2
    silent = Job.objects.create(kind="preflight", target_type="inventory.node", target_id=node.pk)
    beating = Job.objects.create(kind="discover", target_type="inventory.node", target_id=node.pk)
    job_transition(silent, "running", worker="other-host:4242")
    job_transition(beating, "running", worker="other-host:4243")
    Job.objects.filter(pk=silent.pk).update(heartbeat=timezone.now() - timedelta(seconds=3))
    sweeper = JobSweeper().start()
    try:
        deadline = time.monotonic() + 15
        while Job.objects.get(pk=silent.pk).status == "running":
            assert time.monotonic() < deadline, "the worker's sweeper never failed the silent job"
            Job.objects.filter(pk=beating.pk).update(heartbeat=timezone.now())
            time.sleep(0.2)
    finally:
        sweeper.stop()
    silent.refresh_from_db()
    assert silent.status == "failed" and "other-host:4242" in silent.explanation
    assert Job.objects.get(pk=beating.pk).status == "running"
