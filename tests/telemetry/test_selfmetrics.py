"""GET /metrics, the control plane's own numbers in Prometheus' text format: jobs by kind and status, scrape rounds
(counted in Redis by whoever scrapes), websocket clients and SSH connections per process (each process's number
under a key of its own that expires, so a dead process's number disappears); nothing without a token or a login."""

import time

import pytest
from channels.db import database_sync_to_async
from django.core.cache import cache
from prometheus_client.parser import text_string_to_metric_families

from apps.jobs.models import Job
from apps.realtime.process_gauges import gauge_values, process_id, publish
from apps.telemetry.round_stats import record_round_stats
from tests.ws_helpers import close_executor_connections, session_communicator  # noqa: F401

pytestmark = pytest.mark.django_db


def scrape(client) -> dict[tuple, float]:
    """{(sample name, ((label, value), ...)): value} of one /metrics answer."""
    response = client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text;version=1.0.0;q=0.75,"
                                                  "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")  # Prometheus' Accept
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_nothing_without_a_token_or_a_role(api_client_for):
    from rest_framework.test import APIClient

    Job.objects.create(kind="deploy", target_type="deployments.deployment", target_id=1, target_label="x")
    anonymous = APIClient().get("/metrics")
    assert anonymous.status_code == 401 and b"pdcp_jobs" not in anonymous.content
    assert api_client_for(None).get("/metrics").status_code == 403
    bad = APIClient(HTTP_AUTHORIZATION="Token not-a-token").get("/metrics")
    assert bad.status_code == 401 and b"pdcp_jobs" not in bad.content


def test_an_expired_token_is_refused_saying_so(api_client_for, settings):
    from datetime import timedelta

    from django.utils import timezone
    from rest_framework.authtoken.models import Token

    client = api_client_for("viewer")
    assert client.get("/metrics").status_code == 200
    settings.API_TOKEN_TTL_HOURS = 1
    Token.objects.filter(user=client.user).update(created=timezone.now() - timedelta(hours=2))
    expired = client.get("/metrics")
    assert expired.status_code == 401 and b"expired" in expired.content


def test_a_logged_in_viewer_reads_it_too(client, make_user):
    client.force_login(make_user("viewer"))
    assert ("pdcp_redis_up", ()) in scrape(client)


def test_jobs_by_kind_and_status(api_client_for):
    for kind, status in (("deploy", "successful"), ("deploy", "successful"), ("deploy", "failed"),
                         ("evaluate", "running")):
        Job.objects.create(kind=kind, status=status, target_type="deployments.deployment", target_id=1,
                           target_label="x")
    metrics = scrape(api_client_for("viewer"))
    assert metrics[("pdcp_jobs", (("kind", "deploy"), ("status", "successful")))] == 2
    assert metrics[("pdcp_jobs", (("kind", "deploy"), ("status", "failed")))] == 1
    assert metrics[("pdcp_jobs", (("kind", "evaluate"), ("status", "running")))] == 1
    assert metrics[("pdcp_jobs", (("kind", "stop"), ("status", "pending")))] == 0
    assert metrics[("pdcp_redis_up", ())] == 1


def test_scrape_rounds_their_duration_and_failed_targets(api_client_for, deployment):
    record_round_stats(deployment_id=deployment.pk, duration_s=0.03, targets=14, failed=0)
    record_round_stats(deployment_id=deployment.pk, duration_s=0.7, targets=14, failed=3)
    before = time.time()
    record_round_stats(deployment_id=deployment.pk, duration_s=12.0, targets=14, failed=1)
    metrics = scrape(api_client_for("viewer"))
    d = (("deployment", "reference"),)
    assert metrics[("pdcp_scrape_rounds_total", d)] == 3
    assert metrics[("pdcp_scrape_targets_total", d)] == 42
    assert metrics[("pdcp_scrape_failed_targets_total", d)] == 4
    assert metrics[("pdcp_scrape_last_round_failed_targets", d)] == 1
    assert metrics[("pdcp_scrape_last_round_timestamp_seconds", d)] >= before
    bucket = {le: metrics[("pdcp_scrape_round_duration_seconds_bucket", (("deployment", "reference"), ("le", le)))]
              for le in ("0.05", "0.5", "1.0", "10.0", "+Inf")}
    assert bucket == {"0.05": 1, "0.5": 1, "1.0": 2, "10.0": 2, "+Inf": 3}
    assert metrics[("pdcp_scrape_round_duration_seconds_count", d)] == 3
    assert metrics[("pdcp_scrape_round_duration_seconds_sum", d)] == pytest.approx(12.73)


def test_per_process_numbers_are_listed_and_a_dead_process_disappears(api_client_for):
    publish("websocket_clients", "web-a:101", 3)
    publish("websocket_clients", "web-b:202", 1)
    publish("ssh_connections", "worker-a:303", 4)
    metrics = scrape(api_client_for("viewer"))
    assert metrics[("pdcp_websocket_clients", (("process", "web-a:101"),))] == 3
    assert metrics[("pdcp_websocket_clients", (("process", "web-b:202"),))] == 1
    assert metrics[("pdcp_ssh_connections_open", (("process", "worker-a:303"),))] == 4
    cache.delete("gauge:websocket_clients:web-a:101")  # what its TTL does when web-a stops refreshing
    assert gauge_values("websocket_clients") == {"web-b:202": 1}
    publish("websocket_clients", "web-c:404", 2)  # the next writer prunes web-a from the index
    assert cache.get("gauge:websocket_clients:processes") == ["web-b:202", "web-c:404"]


def wait_for(read, expected, timeout=8.0):
    deadline = time.monotonic() + timeout
    while (value := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


class FakeConnection:
    is_open = True


def test_an_ssh_connection_opening_and_closing_is_published_by_this_process():
    from sshexec.connection_stats import connection_changed, open_connection_count

    base = open_connection_count()
    fake = FakeConnection()
    connection_changed(fake)  # what SshConnection does once connected; the telemetry app listens from start-up
    assert open_connection_count() == base + 1
    assert wait_for(lambda: gauge_values("ssh_connections").get(process_id()), base + 1) == base + 1
    fake.is_open = False
    connection_changed()  # what a close does
    assert wait_for(lambda: gauge_values("ssh_connections").get(process_id()), base) == base


@pytest.mark.procs
def test_a_forked_child_publishes_its_own_connections_not_its_parents():
    """A Celery prefork child: the listener registered at start-up is inherited, the publishing thread is its own."""
    import os
    import socket

    from sshexec.connection_stats import connection_changed, open_connection_count

    parents = FakeConnection()
    connection_changed(parents)
    base = open_connection_count()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        try:
            held = [FakeConnection(), FakeConnection()]  # remembered weakly: held while "open"
            for connection in held:
                connection_changed(connection)
            time.sleep(3)
        finally:
            os._exit(0)
    try:
        name = f"{socket.gethostname()}:{child}"
        # FakeConnection is open in any process; a real SshConnection of the parent counts 0 in the child.
        assert wait_for(lambda: gauge_values("ssh_connections").get(name), base + 2) == base + 2
        assert wait_for(lambda: gauge_values("ssh_connections").get(process_id()), base) == base
    finally:
        os.waitpid(child, 0)


def test_a_connection_counts_only_in_the_process_that_opened_it(monkeypatch):
    import os
    from types import SimpleNamespace

    from sshexec import SshConnection, SshTarget
    from tests.keys import TEST_HOST_KEY

    connection = SshConnection(SshTarget(name="n", address="127.0.0.1", port=22, username="u", private_key=None,
                                         password="p", host_key=TEST_HOST_KEY))
    assert not connection.is_open  # never connected
    transport = SimpleNamespace(is_active=lambda: True)
    monkeypatch.setattr(connection, "_client", SimpleNamespace(get_transport=lambda: transport))
    assert connection.is_open
    monkeypatch.setattr(connection, "_pid", os.getpid() + 1)  # as a forked child sees its parent's connection
    assert not connection.is_open


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_websocket_clients_are_counted_while_connected(make_user):
    from apps.deployments.models import Deployment
    from apps.inventory.models import Cluster

    def setup():
        return make_user("viewer"), Deployment.objects.create(name="ws", cluster=Cluster.objects.create(name="c"))

    def published():
        return gauge_values("websocket_clients").get(process_id())

    user, deployment = await database_sync_to_async(setup)()
    ws = await session_communicator(user, f"/ws/deployments/{deployment.pk}/")
    connected, _ = await ws.connect()
    assert connected
    assert await database_sync_to_async(wait_for)(published, 1) == 1
    await ws.disconnect()
    assert await database_sync_to_async(wait_for)(published, 0) == 0
