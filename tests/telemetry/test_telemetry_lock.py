"""One scrape round per deployment at a time, and a round that outlived its lock leaves the next one's alone."""

import pytest
from django.core.cache import cache

from apps.deployments.models import Deployment
from apps.inventory.models import Cluster
from apps.telemetry.services import deployment_scrape

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployment():
    return Deployment.objects.create(name="locked", cluster=Cluster.objects.create(name="c"))


def test_a_round_is_skipped_while_another_holds_the_lock(deployment):
    cache.set(f"telemetry:lock:{deployment.pk}", "someone-else", timeout=15)
    assert deployment_scrape(deployment, [], fetch=lambda url: "") is None


def test_a_slow_round_does_not_release_the_next_rounds_lock(deployment):
    lock = f"telemetry:lock:{deployment.pk}"

    def fetch_while_the_lock_expires_and_is_retaken(url):
        cache.set(lock, "next-round", timeout=15)  # our lock expired mid-round and the next round took it
        return ""

    from apps.deployments.models import Process

    process = Process(deployment=deployment, key="p0-dp0", role="prefill", instance="p0", address="127.0.0.1",
                      ports=[1])
    assert deployment_scrape(deployment, [process], fetch=fetch_while_the_lock_expires_and_is_retaken) is not None
    assert cache.get(lock) == "next-round"
    cache.delete(lock)
