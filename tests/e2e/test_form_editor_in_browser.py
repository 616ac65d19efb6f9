"""The form editor's issue-11 fields in a real browser: an instance spread over two nodes from its node cell, the
KV pool switched to memcache (its memcache-only fields come on) and back (they go off and are not saved)."""

from pathlib import Path

import pytest

pytestmark = [pytest.mark.procs, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def reference_deployment():
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import

    operator = get_user_model().objects.create_user("former", password="e2e-password-123")
    set_role(operator, Role.OPERATOR)
    inventory_import((EXAMPLES / "reference-cluster.yaml").read_text())
    return deployment_create(name="reference", cluster=Cluster.objects.get(name="reference"), user=operator,
                             yaml_text=(EXAMPLES / "reference-topology-fixed.yaml").read_text())


def test_an_operator_spreads_d0_over_two_nodes_and_switches_the_pool(live_stack, browser, reference_deployment,
                                                                      tmp_path):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{live_stack}/login/")
    page.fill("input[name=username]", "former")
    page.fill("input[name=password]", "e2e-password-123")
    page.click("button[type=submit]")
    form_url = f"{live_stack}/deployments/{reference_deployment.pk}/edit/form/"
    page.goto(form_url)

    install_path = page.locator("#f-kv-pool-install-path")
    expect(install_path).to_be_disabled()  # backend mooncake: the memcache-only fields are off
    page.select_option("#f-kv-pool-backend", "memcache")
    expect(install_path).to_be_enabled()
    install_path.fill("/usr/local/lib/python3.11/site-packages")
    page.select_option("#f-kv-pool-protocol", "device_sdma")
    page.fill("#f-kv-pool-rpc-port", "")
    page.fill("#f-kv-pool-metrics-port", "")
    page.check("#f-kv-pool-consumer-is-to-load")
    page.select_option("#f-kv-pool-load-failure-policy", "recompute")
    page.fill("#f-instances-2-node", "node2, node3")
    page.fill("#f-instances-2-dp", "8")
    page.fill("#f-instances-2-engine-id", "2")
    page.check("#f-instances-3-remove")
    page.check("input[name=activate]")
    page.screenshot(path=str(tmp_path / "form-memcache.png"), full_page=True)
    page.click("button.primary:text('Save revision')")
    page.wait_for_url(f"{live_stack}/deployments/{reference_deployment.pk}/")

    reference_deployment.refresh_from_db()
    spec = reference_deployment.active_revision.spec
    d0 = spec["instances"][2]
    assert d0["nodes"] == ["node2", "node3"] and d0["dp"] == 8 and d0["engine_id"] == "2"
    assert [i["name"] for i in spec["instances"]] == ["p0", "p1", "d0"]
    assert spec["kv_pool"] == {"node": "proxy", "backend": "memcache", "rpc_port": 5000, "metrics_port": 8000,
                               "config_store_port": 6000, "segment_size": "1GB", "protocol": "device_sdma",
                               "install_path": "/usr/local/lib/python3.11/site-packages",
                               "load_failure_policy": "recompute", "consumer_is_to_load": True,
                               "consumer_is_to_put": False}

    page.goto(form_url)
    expect(page.locator("#f-instances-2-node")).to_have_value("node2, node3")
    expect(install_path).to_be_enabled()
    page.select_option("#f-kv-pool-backend", "mooncake")
    expect(install_path).to_be_disabled()
    expect(page.locator("#f-kv-pool-protocol")).to_be_disabled()
    page.fill("#f-kv-pool-rpc-port", "")
    page.fill("#f-kv-pool-metrics-port", "")
    page.check("input[name=activate]")
    page.click("button.primary:text('Save revision')")
    page.wait_for_url(f"{live_stack}/deployments/{reference_deployment.pk}/")
    reference_deployment.refresh_from_db()
    revision = reference_deployment.active_revision
    assert revision.number == 3
    assert {k: v for k, v in revision.spec["kv_pool"].items() if k in ("backend", "rpc_port", "protocol")} == {
        "backend": "mooncake", "rpc_port": 50088}
    assert revision.spec["instances"][2]["nodes"] == ["node2", "node3"]
    assert errors == []
