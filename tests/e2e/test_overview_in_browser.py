"""The home page's overview in a real browser (issue 12 item 3): a deployment's instances healthy of total, req/s and
KV flow from the live state, and the row changing by itself, without a reload, when the health and the live state
change."""

from pathlib import Path

import pytest

from tests.e2e.pages import LIVE_KEPT_S, SHOWN_MS, logged_in_page

pytestmark = [pytest.mark.procs, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def watched_deployment():
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import

    viewer = get_user_model().objects.create_user("watcher", password="e2e-password-123")
    set_role(viewer, Role.VIEWER)
    inventory_import((EXAMPLES / "reference-cluster.yaml").read_text())
    return deployment_create(name="reference", cluster=Cluster.objects.get(name="reference"), user=None,
                             yaml_text=(EXAMPLES / "reference-topology-fixed.yaml").read_text())


def live_state(*, req_s: float, kv: float) -> dict:
    import time

    return {"at": time.time(), "targets": [{"key": "proxy", "role": "proxy"}],
            "services": {"proxy": {"status": "ok", "req_s": req_s}},
            "edges": {"kv_transfer:inst:p0->inst:d0": {"kv_bytes_s": kv}}, "instances": {}}


def test_the_overview_shows_a_deployment_and_follows_it_without_reload(live_stack, browser, watched_deployment):
    from django.conf import settings
    from django.core.cache.backends.redis import RedisCache
    from django.utils import timezone
    from playwright.sync_api import expect

    from apps.telemetry.models import InstanceHealth
    from apps.telemetry.selectors import live_key
    from tests.e2e.conftest import E2E_REDIS

    web_cache = RedisCache(E2E_REDIS, {"KEY_PREFIX": settings.PDCP_NAMESPACE})
    pk = watched_deployment.pk
    for subject, state in {"p0": "healthy", "p1": "healthy", "d0": "unhealthy", "d1": "starting"}.items():
        InstanceHealth.objects.create(deployment=watched_deployment, subject=subject, state=state, since=timezone.now())
    web_cache.set(live_key(pk), live_state(req_s=8.0, kv=2.5e9), timeout=LIVE_KEPT_S)
    try:
        page, errors = logged_in_page(browser, live_stack, height=900)
        page.wait_for_url(f"{live_stack}/")

        row = page.locator("#overview tr[data-deployment=reference]")
        expect(row.locator("a", has_text="reference")).to_have_attribute("href", f"/deployments/{pk}/")
        expect(row.locator(".instances")).to_have_attribute("data-good", "2")
        expect(row.locator(".instances")).to_contain_text("2/4")
        expect(row.locator(".instances .badge.red")).to_have_text("1 unhealthy")
        expect(row.locator(".req-s")).to_have_text("8.0 req/s")
        expect(row.locator(".kv-flow")).to_have_text("2.5 GB/s")
        page.evaluate("window.__notReloaded = true")

        InstanceHealth.objects.filter(deployment=watched_deployment).update(state="healthy")
        web_cache.set(live_key(pk), live_state(req_s=31.0, kv=4.2e9), timeout=LIVE_KEPT_S)
        # Polled every 5 s: the row changes within one poll (plus a margin for a slow machine).
        expect(row.locator(".instances")).to_have_attribute("data-good", "4", timeout=SHOWN_MS)
        expect(row.locator(".req-s")).to_have_text("31.0 req/s")
        expect(row.locator(".kv-flow")).to_have_text("4.2 GB/s")
        assert page.evaluate("window.__notReloaded === true")
        assert row.locator(".instances .badge.red").count() == 0
        assert errors == []
    finally:
        web_cache.delete(live_key(pk))
