"""The reference topology as containers in a real browser: an operator deploys it on the simulated cluster
(127.0.10.70-.74, .84, shared with tests/deployments/test_container_deploy_sim.py, one xdist group), sees every
instance running in the picture, stops it, and no container is left on any node."""

from pathlib import Path

import pytest

from tests.deployments.containersim import (
    ENGINE_NODES,
    container_sim_spec,
    containers_topology,
    deployment_containers,
)
from tests.deployments.simdeploy import start_spec, stop_cluster
from tests.e2e.test_deploy_in_browser import wait_for_job

pytestmark = [pytest.mark.procs, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def sim():
    state_dir, state = start_spec(container_sim_spec(), prefix="pdcp-container-e2e-")
    try:
        yield state
    finally:
        stop_cluster(state_dir)


@pytest.fixture
def deployment(sim, run_dir):
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import

    inventory_import(Path(sim["inventory"]).read_text(), allow_key_files=True)  # allows the container example
    operator = get_user_model().objects.create_user("ops", password="e2e-password-123")
    set_role(operator, Role.OPERATOR)
    return deployment_create(name="refc", cluster=Cluster.objects.get(name="reference"), user=operator,
                             yaml_text=containers_topology(run_dir))


def test_operator_deploys_the_container_reference_sees_it_running_and_stops_it(live_stack, browser, deployment,
                                                                               sim, tmp_path):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{live_stack}/login/")
    page.fill("input[name=username]", "ops")
    page.fill("input[name=password]", "e2e-password-123")
    page.click("button[type=submit]")
    page.goto(f"{live_stack}/deployments/{deployment.pk}/")
    detail_url = page.url

    page.click("button:text('Deploy r1')")
    status, explanation = wait_for_job(page, timeout_ms=240000)
    assert status == "successful", explanation
    assert len(deployment_containers(sim, "refc", "node2")) == 4

    page.goto(detail_url)
    for name in ("p0", "p1", "d0", "d1"):
        expect(page.locator(f"#topology .topo-instance[data-instance={name}]")).to_have_attribute(
            "data-state", "running", timeout=30000)
    page.locator("#topology").screenshot(path=str(tmp_path / "containers-topology.png"))

    page.click("button:text('Stop')")
    status, explanation = wait_for_job(page, timeout_ms=180000)
    assert status == "successful", explanation
    left = {node: list(deployment_containers(sim, "refc", node)) for node in ENGINE_NODES}
    assert left == {node: [] for node in ENGINE_NODES}, left
