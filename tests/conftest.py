"""Shared fixtures. Django is imported lazily so the Django-free suites (pdproxy, simcluster) also run alone."""

import itertools
import os
from pathlib import Path

import pytest

from tests.keys import TEST_HOST_KEY, TEST_PRIVATE_KEY, generate_key_pair  # noqa: F401  (re-exported)

pytest_plugins = [
    "tests.api_schema_check",  # /api/ answers checked against the OpenAPI schema
    "tests.procs_guard",  # a test not marked `procs` may start no process and no server
    "tests.xdist_groups",  # which process-starting tests may run side by side under pytest-xdist
]

_serial = itertools.count(1)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """A test database per run, so two runs on one machine (or a developer beside CI) never share one."""
    from django.conf import settings

    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0  # threads (heartbeat, websockets) must not keep connections
    test = settings.DATABASES["default"].setdefault("TEST", {})
    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        test["NAME"] = f"test_pdcp_{os.getpid()}"


@pytest.fixture(scope="session", autouse=True)
def drop_this_runs_redis_keys():
    """Jobs the tests queue are never consumed: at the end, this run's namespace (tests/settings.py) leaves Redis."""
    yield
    from django.conf import settings

    namespace = getattr(settings, "PDCP_NAMESPACE", "") if settings.configured else ""
    if namespace != os.environ.get("PDCP_TEST_NAMESPACE"):
        return  # a namespace someone chose: never wipe it
    import redis

    for url in {settings.REDIS_URL, settings.CELERY_BROKER_URL}:
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(f"{namespace}:*", count=1000))
        if keys:
            client.delete(*keys)


@pytest.fixture
def make_user(db):
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role

    def make(role: str | None, username: str | None = None, password: str = "s3cret-pass-word"):
        user = get_user_model().objects.create_user(username=username or f"{role or 'norole'}-user",
                                                    password=password)
        if role:
            set_role(user, Role(role))
        return user

    return make


@pytest.fixture
def api_client_for(make_user):
    """An API client authenticated with a real token for a user of the given role."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    used = set()

    def client_for(role: str | None):
        user = make_user(role, username=f"api-{role or 'none'}" + ("" if role not in used else f"-{next(_serial)}"))
        used.add(role)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
        client.user = user
        return client

    return client_for


@pytest.fixture
def cluster(db):
    from apps.inventory.models import Cluster

    return Cluster.objects.create(name="reference", description="test cluster")


@pytest.fixture
def credential(db):
    from apps.inventory.models import SshCredential
    from apps.inventory.services import credential_save

    return credential_save(SshCredential(name="sim", username="simnode"), secret=TEST_PRIVATE_KEY)


@pytest.fixture
def node(cluster, credential):
    from apps.inventory.models import Node

    return Node.objects.create(cluster=cluster, name="node0", address="127.0.10.171", ssh_port=22,
                               credential=credential, host_key=TEST_HOST_KEY, hardware_model="Atlas 800I A3",
                               npu_count=16)




@pytest.fixture
def own_cache_prefix(settings, request):
    """Redis keys (live state, locks, lockout counters) under a prefix of this test's own: no other test or
    parallel run reads or holds ours. pytest-django restores the setting afterwards."""
    import copy
    import uuid

    caches = copy.deepcopy(settings.CACHES)
    # Below this run's namespace, so drop_this_runs_redis_keys clears them too.
    caches["default"]["KEY_PREFIX"] = f"{settings.PDCP_NAMESPACE}:{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"
    settings.CACHES = caches


@pytest.fixture
def no_celery(monkeypatch):
    """Jobs run where the test says (run_job in this process, a thread or a subprocess), never via the broker."""
    from apps.jobs import tasks

    monkeypatch.setattr(tasks.run_job_task, "apply_async", lambda *a, **k: None)


@pytest.fixture
def run_dir():
    """A deployment's run dir below the simulated nodes' private root; whatever still runs there fails the test."""
    from tests.deployments.simdeploy import new_run_dir, remove_run_dir

    path = new_run_dir()
    yield path
    remove_run_dir(path)


CHROMIUM = "/usr/bin/chromium"  # Debian's, never a downloaded browser
# A page's load event waits for every script and style sheet: on a loaded two-core machine daphne once took over
# Playwright's default 30 s to serve them all (a loaded full run, test_topology_in_browser).
NAVIGATION_TIMEOUT_MS = 90_000
# Actions (a click, a screenshot): a loaded three-worker run's full-page screenshot took over the default 30 s.
ACTION_TIMEOUT_MS = 60_000


@pytest.fixture
def browser(monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are still synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: scripts/system-packages.sh installs it"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"])
        new_page = b.new_page

        def patient_new_page(*args, **kwargs):
            page = new_page(*args, **kwargs)
            page.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
            page.set_default_timeout(ACTION_TIMEOUT_MS)
            return page

        b.new_page = patient_new_page
        try:
            yield b
        finally:
            from django.db import connections

            # ORM calls made while Playwright runs use a context of their own (greenlets): close its connection.
            connections.close_all()
            b.close()
