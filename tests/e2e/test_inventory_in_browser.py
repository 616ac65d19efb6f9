"""Issue 2's finish line, in a real browser: the admin logs in, sees the cluster, discovers a node of the
simulated cluster over SSH through a real Celery worker, watches the job live, and sees its 16 NPU dies."""

import re

import pytest

from tests.e2e.pages import SHOWN_MS

pytestmark = [pytest.mark.procs, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def admin_with_inventory(simulated_cluster):
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role
    from apps.inventory.services import inventory_import

    admin = get_user_model().objects.create_superuser("admin", "", "e2e-password-123")
    set_role(admin, Role.ADMIN)
    inventory_import((simulated_cluster / "inventory.yaml").read_text(), allow_key_files=True)
    return admin


def test_admin_discovers_a_node_and_sees_its_16_npus(live_stack, browser, admin_with_inventory, tmp_path):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{live_stack}/")
    assert page.url.startswith(f"{live_stack}/login/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", "e2e-password-123")
    page.click("button[type=submit]")
    page.click("text=e2e")
    page.click("a:text-is('node0')")
    assert page.locator(".npu-tile").count() == 0
    page.click("button:text('Discover NPUs')")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    page.wait_for_selector("#job[data-ws=open]", state="attached", timeout=SHOWN_MS)
    expect(page.locator("#job-status")).to_have_text("Successful", timeout=30000)
    expect(page.locator("#log")).to_contain_text("npu-smi info")
    expect(page.locator(".progress-row[data-node=node0] .state")).to_have_text("done")
    page.screenshot(path=str(tmp_path / "job.png"))
    page.click("a:text('Jobs')")
    page.goto(page.url.replace("/jobs/", "/"))
    page.goto(f"{live_stack}/")
    page.click("text=e2e")
    page.click("a:text-is('node0')")
    tiles = page.locator(".npu-tile")
    expect(tiles).to_have_count(16)
    assert page.locator(".npu-tile.health-green").count() == 16
    assert sorted(int(t.get_attribute("data-logical-id")) for t in tiles.all()) == list(range(16))
    page.screenshot(path=str(tmp_path / "node.png"), full_page=True)


def test_viewer_cannot_discover_in_the_browser(live_stack, browser, admin_with_inventory):
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role

    viewer = get_user_model().objects.create_user("watcher", password="e2e-password-123")
    set_role(viewer, Role.VIEWER)
    page = browser.new_page()
    page.goto(f"{live_stack}/login/")
    page.fill("input[name=username]", "watcher")
    page.fill("input[name=password]", "e2e-password-123")
    page.click("button[type=submit]")
    page.click("text=e2e")
    page.click("a:text-is('node0')")
    assert page.locator("button:text('Discover NPUs')").count() == 0
    assert page.locator("text=viewer").count() >= 1
