"""A Redis restarted without persistence holds none of the messages queued before it: the pending jobs they named
are sent again by the next sweep (apps/jobs/broker.py), once each. A job created while the broker is down is
accepted and stays pending, then is sent once the broker answers. A real redis-server of this test's own."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.reliability.stack_procs import RedisServer, this_process_on

pytestmark = [pytest.mark.procs, pytest.mark.django_db]


def messages_for(redis_url: str, job_id: int) -> int:
    """How many of the broker's queued messages run this job (Celery's protocol 2: headers.argsrepr)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        found = 0
        for key in client.scan_iter(count=1000):
            if client.type(key) != b"list":
                continue
            for raw in client.lrange(key, 0, -1):
                found += json.loads(raw)["headers"].get("argsrepr") == f"({job_id},)"
        return found
    finally:
        client.close()


def run_id(redis_url: str) -> str:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return client.info("server")["run_id"]
    finally:
        client.close()


def a_job(node, user):
    from apps.jobs.choices import JobKind
    from apps.jobs.services import job_create

    return job_create(kind=JobKind.DISCOVER, target=node, user=user)


def a_sweep_later():
    from apps.jobs.services import requeue_lost_jobs

    return requeue_lost_jobs(now=timezone.now() + timedelta(minutes=1))


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


def test_a_job_queued_before_a_redis_restart_is_queued_again_once(redis_server, settings, node, make_user,
                                                                  django_capture_on_commit_callbacks, figure):
    url = redis_server.url()
    with this_process_on(url, settings):
        with django_capture_on_commit_callbacks(execute=True):
            job = a_job(node, make_user("operator"))
        job.refresh_from_db()
        first_life = run_id(url)
        assert (job.queued_on, messages_for(url, job.pk)) == (first_life, 1)
        assert a_sweep_later() == []  # the broker holds it: nothing sent twice

        redis_server.restart()
        assert run_id(url) != first_life and messages_for(url, job.pk) == 0
        assert a_sweep_later() == [job.pk]
        job.refresh_from_db()
        assert (job.queued_on, messages_for(url, job.pk)) == (run_id(url), 1)
        assert a_sweep_later() == []
    figure("redis-restart-pending-jobs",
           held="a pending job whose message a restarted Redis lost is queued again by the next sweep, once; one "
                "the broker still holds is not sent twice",
           figure="1 job queued, 0 messages after the restart, 1 after the sweep, still 1 after another sweep",
           command='make test PYTEST_ARGS="tests/reliability/test_lost_queue_messages.py"',
           values={"messages_after_restart": 0, "messages_after_sweep": 1})


def test_a_job_created_while_the_broker_is_down_is_kept_and_sent_when_it_answers(
        redis_server, settings, node, make_user, django_capture_on_commit_callbacks):
    from apps.jobs.choices import JobStatus

    url = redis_server.url()
    with this_process_on(url, settings):
        redis_server.stop()
        with django_capture_on_commit_callbacks(execute=True):
            job = a_job(node, make_user("operator"))  # the commit's send fails: no exception reaches the caller
        job.refresh_from_db()
        assert (job.status, job.queued_on) == (JobStatus.PENDING, "")
        assert a_sweep_later() == []  # still down: nothing to do yet

        redis_server.start()
        assert a_sweep_later() == [job.pk]
        assert messages_for(url, job.pk) == 1
