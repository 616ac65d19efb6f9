"""The KV pool's box in a real browser (issue 12 item 5), from real mooncake_master pages
(tests/telemetry/fixtures/): what the deployed reference topology's pool holds, and, for a master no store client
has mounted a segment on, why there is nothing to show instead of "0 keys · 0.0 B of 0.0 B"."""

import time
from pathlib import Path

import pytest

from tests.e2e.pages import LIVE_KEPT_S, SHOWN_MS, logged_in_page

pytestmark = [pytest.mark.procs, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "telemetry" / "fixtures"


@pytest.fixture
def pool_deployment():
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import

    viewer = get_user_model().objects.create_user("watcher", password="e2e-password-123")
    set_role(viewer, Role.VIEWER)
    inventory_import((ROOT / "examples" / "reference-cluster.yaml").read_text())
    deployment = deployment_create(name="reference", cluster=Cluster.objects.get(name="reference"), user=None,
                                   yaml_text=(ROOT / "examples" / "reference-topology-fixed.yaml").read_text())
    Process.objects.create(deployment=deployment, revision=deployment.active_revision, node_name="proxy",
                           role="kv_pool", key="kv-pool", address="127.0.10.5", ports=[50088, 9003], command="x",
                           fingerprint="x", log_path="/l", pid_file="/p", state="running", pid=31000)
    return deployment


def master_round(deployment_id: int, fixture: str) -> dict:
    from apps.telemetry.live import TargetInfo, live_state
    from apps.telemetry.scrape import read_target

    body = (FIXTURES / fixture).read_text()
    reading = read_target("kv-pool", "kv_pool", "u", fetch=lambda url: body)
    return live_state(deployment_id=deployment_id, at=time.time(), kv_bytes_per_token=None, previous=None,
                      targets=[TargetInfo("kv-pool", "kv_pool", "", "127.0.10.5", 50088, "u")], readings=[reading])


def test_the_pool_box_shows_what_the_master_holds_or_why_it_holds_nothing(live_stack, browser, pool_deployment):
    from django.conf import settings
    from django.core.cache.backends.redis import RedisCache
    from playwright.sync_api import expect

    from apps.telemetry.live import history_point
    from apps.telemetry.selectors import history_key, live_key
    from tests.e2e.conftest import E2E_REDIS

    web_cache = RedisCache(E2E_REDIS, {"KEY_PREFIX": settings.PDCP_NAMESPACE})
    pk = pool_deployment.pk

    def show(fixture: str):
        state = master_round(pk, fixture)
        web_cache.set_many({live_key(pk): state, history_key(pk): [history_point(state)]}, timeout=LIVE_KEPT_S)

    try:
        show("mooncake-master-sim-deployed.txt")
        page, errors = logged_in_page(browser, live_stack)
        page.goto(f"{live_stack}/deployments/{pk}/")

        box = page.locator("#topology .live-pool-service[data-key=kv-pool]")
        expect(box).to_have_attribute("data-state", "ok", timeout=SHOWN_MS)
        expect(box.locator(".live-pool-held")).to_have_text(
            "4 keys · 96.3 KB of 671 MB used (<1%) · 10 segments on 4 hosts")
        tip = box.locator("title").first.text_content()
        assert "127.0.10.62: 4 segments, 0.0 B of 268 MB" in tip and "10 store clients connected" in tip

        show("mooncake-master-no-segment.txt")
        page.reload()
        expect(box).to_have_attribute("data-state", "empty", timeout=SHOWN_MS)
        expect(box.locator(".live-pool-held")).to_have_text(
            "no segment mounted: no engine's store client has joined this master")
        assert "0.0 B of 0.0 B" not in box.text_content()
        assert errors == []
    finally:
        web_cache.delete_many([live_key(pk), history_key(pk)])
