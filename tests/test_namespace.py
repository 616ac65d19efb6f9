"""Two installations on one Redis stay apart: cache keys, channel groups, Celery queues and broker keys all live
under PDCP_NAMESPACE, whose default differs per database (controlplane/namespace.py)."""

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parents[1]

SETTINGS_PROBE = """
import json, django
django.setup()
from django.conf import settings
from controlplane.celery import app
router = app.amqp.router
route = lambda name: router.route({}, name)["queue"].name
print(json.dumps({
    "namespace": settings.PDCP_NAMESPACE,
    "cache_prefix": settings.CACHES["default"]["KEY_PREFIX"],
    "channel_prefix": settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"],
    "default_queue": app.conf.task_default_queue,
    "consumed": sorted(q.name for q in app.amqp.queues.values()),
    "broker_keyprefix": app.conf.broker_transport_options.get("global_keyprefix"),
    "routes": {name: route(name) for name in ("apps.jobs.tasks.run_job_task", "apps.jobs.tasks.sweep_orphaned_jobs_task",
                                              "apps.telemetry.tasks.scrape_live_state_task",
                                              "apps.telemetry.tasks.scrape_deployment_task",
                                              "apps.inventory.tasks.poll_npus_task", "apps.evals.tasks.anything")},
    "beat": {name: route(entry["task"]) for name, entry in settings.CELERY_BEAT_SCHEDULE.items()},
}))
"""

WRITE_LIVE = """
import time, django
django.setup()
from django.core.cache import cache
from apps.telemetry.live import history_point, live_state
from apps.telemetry.selectors import history_key, live_key
state = live_state(deployment_id={pk}, at=time.time(), targets=[], readings=[], kv_bytes_per_token=None, previous=None)
cache.set_many({{live_key({pk}): state, history_key({pk}): [history_point(state)]}}, timeout=60)
"""

READ_LIVE = """
import django
django.setup()
from apps.telemetry.selectors import deployment_live, history_key, live_key
print("live" if deployment_live({pk}) is not None else "nothing")
if {delete}:
    from django.core.cache import cache
    cache.delete_many([live_key({pk}), history_key({pk})])
"""


def run_python(code: str, **env_overrides) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PDCP_NAMESPACE", "DATABASE_URL")}
    env.update(DJANGO_SETTINGS_MODULE="controlplane.settings", PYTHONPATH=str(ROOT), **env_overrides)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def settings_for(**env) -> dict:
    return json.loads(run_python(SETTINGS_PROBE, **env).splitlines()[-1])


@pytest.mark.procs
def test_the_default_namespace_differs_per_database_and_every_redis_use_follows_it(tmp_path):
    a = settings_for(DATABASE_URL=f"sqlite:///{tmp_path}/a.sqlite3")
    b = settings_for(DATABASE_URL="postgres://pdcp@db.example.com:5432/pdcp")
    again = settings_for(DATABASE_URL=f"sqlite:///{tmp_path}/a.sqlite3")
    assert a["namespace"] != b["namespace"]
    assert a == again
    for s in (a, b):
        ns = s["namespace"]
        assert re.fullmatch(r"pdcp-[0-9a-f]{8}", ns)
        assert s["cache_prefix"] == s["channel_prefix"] == ns
        assert s["broker_keyprefix"] == f"{ns}:"
        assert s["default_queue"] == f"{ns}.ssh"
        assert s["consumed"] == sorted([f"{ns}.ssh", f"{ns}.telemetry", f"{ns}.evals"])
        assert s["routes"] == {"apps.jobs.tasks.run_job_task": f"{ns}.ssh",
                               "apps.jobs.tasks.sweep_orphaned_jobs_task": f"{ns}.ssh",
                               "apps.telemetry.tasks.scrape_live_state_task": f"{ns}.telemetry",
                               "apps.telemetry.tasks.scrape_deployment_task": f"{ns}.telemetry",
                               "apps.inventory.tasks.poll_npus_task": f"{ns}.telemetry",
                               "apps.evals.tasks.anything": f"{ns}.evals"}
        assert set(s["beat"].values()) <= {f"{ns}.ssh", f"{ns}.telemetry"}


@pytest.mark.procs
def test_an_explicit_namespace_wins_and_a_bad_one_is_refused_by_name(tmp_path):
    db = f"sqlite:///{tmp_path}/a.sqlite3"
    assert settings_for(DATABASE_URL=db, PDCP_NAMESPACE="site-a")["routes"]["apps.jobs.tasks.run_job_task"] == \
        "site-a.ssh"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env={**env, "DATABASE_URL": db, "PDCP_NAMESPACE": "site a:1"})
    assert result.returncode != 0 and "PDCP_NAMESPACE must be" in result.stderr


@pytest.mark.procs
def test_the_worker_queue_helper_prints_the_namespaced_queues(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(DATABASE_URL=f"sqlite:///{tmp_path}/a.sqlite3", PDCP_NAMESPACE="site-b")

    def helper(*args):
        result = subprocess.run([sys.executable, "manage.py", "celery_queues", *args], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=120)
        return result.returncode, result.stdout.strip(), result.stderr

    assert helper()[:2] == (0, "site-b.ssh,site-b.telemetry,site-b.evals")
    assert helper("telemetry")[:2] == (0, "site-b.telemetry")
    code, _, err = helper("gpu")
    assert code != 0 and "gpu" in err and "ssh, telemetry, evals" in err


@pytest.mark.procs
def test_live_state_written_by_one_installation_is_invisible_to_another(tmp_path):
    """The 'live STALE · 12 of 12 targets not read' of issue 8: another database's deployment 1, read back."""
    a, b = f"sqlite:///{tmp_path}/a.sqlite3", f"sqlite:///{tmp_path}/b.sqlite3"
    pk = 1
    run_python(WRITE_LIVE.format(pk=pk), DATABASE_URL=a)
    try:
        assert run_python(READ_LIVE.format(pk=pk, delete=False), DATABASE_URL=b) == "nothing"
    finally:
        assert run_python(READ_LIVE.format(pk=pk, delete=True), DATABASE_URL=a) == "live"


def test_a_channel_group_of_one_namespace_does_not_hear_another():
    from channels_redis.core import RedisChannelLayer
    from django.conf import settings

    hosts = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"]
    suffix = uuid.uuid4().hex[:8]

    async def exchange():
        here, there = RedisChannelLayer(hosts=hosts, prefix=f"ns-a-{suffix}"), \
            RedisChannelLayer(hosts=hosts, prefix=f"ns-b-{suffix}")
        listener, neighbour = await here.new_channel(), await there.new_channel()
        await here.group_add("deployment-1", listener)
        await there.group_add("deployment-1", neighbour)
        await there.group_send("deployment-1", {"type": "relay", "payload": {"from": "b"}})
        await here.group_send("deployment-1", {"type": "relay", "payload": {"from": "a"}})
        got = await asyncio.wait_for(here.receive(listener), timeout=5)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(here.receive(listener), timeout=0.5)
        await here.group_discard("deployment-1", listener)
        await there.group_discard("deployment-1", neighbour)
        await here.flush()
        await there.flush()
        return got

    assert asyncio.run(exchange())["payload"] == {"from": "a"}


def test_a_queued_job_lands_under_this_namespace_only():
    """What a worker of another installation (another namespace) pops can never be this one's job id."""
    from django.conf import settings

    from controlplane.celery import app

    ns = settings.PDCP_NAMESPACE
    result = app.send_task("apps.jobs.tasks.run_job_task", args=[-1])
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    key = f"{ns}:{ns}.ssh"
    try:
        messages = [json.loads(m) for m in client.lrange(key, 0, -1)]
        assert result.id in [m["headers"]["id"] for m in messages]
        for plain in ("ssh", "celery", f"{ns}.ssh"):
            assert result.id not in [json.loads(m)["headers"]["id"] for m in client.lrange(plain, 0, -1)]
    finally:
        for m in client.lrange(key, 0, -1):
            if json.loads(m)["headers"]["id"] == result.id:
                client.lrem(key, 1, m)


def test_no_code_reaches_redis_around_the_namespace():
    """Redis is reached only through Django's cache, the channel layer and Celery, all namespaced in settings;
    and no task picks a queue by a fixed name."""
    offenders = []
    for path in [*ROOT.joinpath("apps").rglob("*.py"), *ROOT.joinpath("controlplane").rglob("*.py")]:
        text = path.read_text()
        rel = path.relative_to(ROOT).as_posix()
        if rel == "controlplane/settings.py":
            continue
        for pattern in (r"^\s*(import|from) (redis|channels_redis|django_redis)\b", r"get_redis_connection",
                        r"\bRedisChannelLayer\(", r"\bqueue\s*=\s*[\"']", r"KEY_PREFIX", r"\bprefix\s*=\s*[\"']pdcp"):
            if re.search(pattern, text, re.M):
                offenders.append(f"{rel}: {pattern}")
    assert offenders == []


@pytest.mark.django_db
def test_a_job_is_queued_on_the_queue_of_its_kind(settings, monkeypatch, django_capture_on_commit_callbacks,
                                                   django_user_model):
    from apps.jobs import tasks
    from apps.jobs.choices import JobKind
    from apps.jobs.services import job_create

    sent = []
    monkeypatch.setattr(tasks.run_job_task, "apply_async", lambda args, queue: sent.append((args[0], queue)))
    user = django_user_model.objects.create_user("queue-probe")
    with django_capture_on_commit_callbacks(execute=True):
        evaluate = job_create(kind=JobKind.EVALUATE, target=user, user=user)
        deploy = job_create(kind=JobKind.DEPLOY, target=user, user=user)
        discover = job_create(kind=JobKind.DISCOVER, target=user, user=user)
    ns = settings.PDCP_NAMESPACE
    assert sent == [(evaluate.pk, f"{ns}.evals"), (deploy.pk, f"{ns}.ssh"), (discover.pk, f"{ns}.ssh")]


def test_each_xdist_worker_gets_a_namespace_of_its_own_and_its_subprocesses_keep_it():
    from tests.settings import own_namespace

    controller = {}
    own_namespace(controller, 100)
    assert controller["PDCP_NAMESPACE"] == "pdcp-test-100"
    workers = [{**controller, "PYTEST_XDIST_WORKER": w} for w in ("gw0", "gw1")]
    for env, pid in zip(workers, (101, 102), strict=True):
        own_namespace(env, pid)
    assert [w["PDCP_NAMESPACE"] for w in workers] == ["pdcp-test-100-gw0", "pdcp-test-100-gw1"]
    child = dict(workers[0])  # a stack or job a worker's test starts, with tests.settings
    own_namespace(child, 200)
    assert child["PDCP_NAMESPACE"] == "pdcp-test-100-gw0"
    elsewhere = {**workers[0], "PDCP_NAMESPACE": "pdcp-test-100-gw0-lost"}  # a namespace a test chose
    own_namespace(elsewhere, 201)
    assert elsewhere["PDCP_NAMESPACE"] == "pdcp-test-100-gw0-lost"
    chosen = {"PDCP_NAMESPACE": "site-a", "PYTEST_XDIST_WORKER": "gw0"}
    own_namespace(chosen, 300)
    assert chosen["PDCP_NAMESPACE"] == "site-a"


def test_this_worker_runs_under_a_namespace_of_its_own(settings):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and settings.PDCP_NAMESPACE.startswith("pdcp-test-"):
        assert settings.PDCP_NAMESPACE.endswith(f"-{worker}")
    assert settings.CACHES["default"]["KEY_PREFIX"] == settings.PDCP_NAMESPACE
