"""The reference topology as containers, on the simulated cluster (127.0.10.70-.74, .84, shared with
tests/deployments/test_container_deploy_sim.py, one xdist group): in a real browser an operator deploys it, sees every
instance running in the picture and stops it; from a shell, examples/pdcp-demo.sh does the same with `pdcp` alone.
Either way no container is left on any node."""

import subprocess
from pathlib import Path

import pytest

from tests.deployments.containersim import (
    ENGINE_NODES,
    container_sim_spec,
    containers_topology,
    deployment_containers,
)
from tests.deployments.simdeploy import start_spec, stop_cluster
from tests.e2e.pdcp_demo import make_admin, pdcp_env, run_demo
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


def test_the_demo_script_deploys_and_stops_the_container_reference(live_stack, sim, run_dir, tmp_path):
    """`pdcp` only: the inventory's allowlist (images, mounts) comes in with `pdcp import`, the plan shows each
    engine's `docker run`, the deploy starts four containers per engine node, and the stop removes them."""
    from apps.deployments.models import Process
    from apps.jobs.models import Job

    make_admin()
    spec = tmp_path / "reference-containers.yaml"
    spec.write_text(containers_topology(run_dir))
    env = pdcp_env(live_stack, tmp_path)
    result = run_demo(env, sim["inventory"], spec, "refc", tmp_path, timeout=300)
    out = result.stdout
    assert "imported: 1 credentials, 1 clusters, 6 nodes created" in out
    plan = subprocess.run(["pdcp", "plan", "refc"], env=env, cwd=tmp_path, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert plan.returncode == 0, plan.stderr
    for key in ("p0-dp0", "p1-dp0", *(f"d{d}-dp{r}" for d in (0, 1) for r in range(4))):
        assert f"# {key} exactly as a deploy starts it as a container:" in plan.stdout
        assert f"docker run -d --name pdcp-refc-{key} " in plan.stdout
    deploy, stop = Job.objects.get(kind="deploy"), Job.objects.get(kind="stop")
    assert (deploy.status, stop.status) == ("successful", "successful"), (deploy.explanation, stop.explanation)
    engines = Process.objects.filter(deployment__name="refc", role__in=("prefill", "decode"))
    assert engines.count() == 10 and all(p.command.startswith(f"docker rm pdcp-refc-{p.key} ") for p in engines)
    assert "done: refc was deployed and stopped" in out and "Traceback" not in result.stderr
    left = {node: list(deployment_containers(sim, "refc", node)) for node in ENGINE_NODES}
    assert left == {node: [] for node in ENGINE_NODES}, left
