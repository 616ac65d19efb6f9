"""Issue 5's finish line, in a real browser: an operator plans, deploys, watches and stops the reference topology
on the simulated cluster; a completion goes through the deployed proxy; nothing is left running."""

import json
import re
import urllib.request
from pathlib import Path

import pytest

from tests.deployments.simdeploy import (
    processes_mentioning,
    topology_yaml,
)
from tests.e2e.pages import SHOWN_MS

pytestmark = [pytest.mark.procs, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def deployment(sim, run_dir):
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import

    inventory_import(Path(sim["inventory"]).read_text(), allow_key_files=True)
    operator = get_user_model().objects.create_user("ops", password="e2e-password-123")
    set_role(operator, Role.OPERATOR)
    return deployment_create(name="reference-sim", cluster=Cluster.objects.get(name="reference"), user=operator,
                             yaml_text=topology_yaml(run_dir))


def completion(address: str, port: int = 1999) -> dict:
    body = json.dumps({"model": "qwen3-235b", "prompt": "Hello from the browser test", "max_tokens": 8}).encode()
    request = urllib.request.Request(f"http://{address}:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def wait_for_job(page, timeout_ms: int):
    from playwright.sync_api import expect

    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    page.wait_for_selector("#job[data-ws=open]", state="attached", timeout=SHOWN_MS)
    expect(page.locator("#job[data-status=successful], #job[data-status=failed], #job[data-status=error]")
           ).to_have_count(1, timeout=timeout_ms)
    return page.locator("#job").get_attribute("data-status"), page.locator("#job-explanation").inner_text()


def test_operator_plans_deploys_watches_and_stops_the_reference_topology(live_stack, browser, deployment, run_dir,
                                                                         tmp_path):
    from playwright.sync_api import expect

    from apps.deployments.models import Process

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{live_stack}/login/")
    page.fill("input[name=username]", "ops")
    page.fill("input[name=password]", "e2e-password-123")
    page.click("button[type=submit]")

    page.click("a:text('Deployments')")
    page.click("a:text('reference-sim')")
    detail_url = page.url
    page.click("a:text('Plan (see every command)')")
    expect(page.locator("body")).to_contain_text("vllm serve")
    expect(page.locator("body")).to_contain_text("pdproxy")
    page.screenshot(path=str(tmp_path / "plan.png"), full_page=True)

    page.goto(detail_url)
    page.click("button:text('Deploy r1')")
    status, explanation = wait_for_job(page, timeout_ms=180000)
    page.screenshot(path=str(tmp_path / "deploy-job.png"), full_page=True)
    assert status == "successful", explanation
    assert page.locator(".progress-row .state:text('done')").count() >= 5
    proxy = Process.objects.get(key="proxy")
    assert completion(proxy.address)["choices"][0]["text"]

    page.goto(detail_url)
    expect(page.locator("body")).to_contain_text("running")
    page.click("button:text('Stop')")
    status, explanation = wait_for_job(page, timeout_ms=120000)
    assert status == "successful", explanation
    assert processes_mentioning(run_dir) == []
