"""Issue 16's finish line in a real browser: an operator opens the playground of the deployed reference topology
(simulated cluster on 127.0.10.90-.94), sends a chat, sees the answer arrive in parts, its TTFT/ITL, and which
Prefill and Decode served it; a second turn shows each answer with its own P and D."""

import pytest

from tests.deployments.simdeploy import import_inventory, run_job_now, running_cluster, topology_yaml
from tests.e2e.pages import logged_in_page

pytestmark = [pytest.mark.procs,
              pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def sim():
    with running_cluster(90, without=("bench",)) as state:  # .90-.94: this suite's addresses
        yield state


def test_operator_chats_with_the_deployed_topology_and_sees_which_p_and_d_served(live_stack, browser, sim,
                                                                                  run_dir, tmp_path):
    from django.contrib.auth import get_user_model
    from playwright.sync_api import expect

    from apps.accounts.roles import Role, set_role
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop
    from tests.e2e.pages import WATCHER_PASSWORD

    operator = get_user_model().objects.create_user("ops", password=WATCHER_PASSWORD)
    set_role(operator, Role.OPERATOR)
    deployment = deployment_create(name="reference-sim", cluster=import_inventory(sim), user=operator,
                                   yaml_text=topology_yaml(run_dir, edit=lambda d: d.pop("bench_client", None)))
    assert run_job_now(deployment_deploy, deployment, operator).status == "successful"
    keys = set(Process.objects.filter(deployment=deployment, role__in=("prefill", "decode"))
               .values_list("key", flat=True))
    try:
        page, errors = logged_in_page(browser, live_stack, user="ops")
        page.goto(f"{live_stack}/deployments/{deployment.pk}/")
        page.click("#playground-link")
        page.wait_for_url(f"**/deployments/{deployment.pk}/playground/")
        page.fill("#pg-text", "Hello from the playground browser test")
        page.fill("input[name=max_tokens]", "24")
        page.click("#pg-send")
        expect(page.locator("#playground[data-state=done]")).to_have_count(1, timeout=60000)
        assert int(page.locator("#playground").get_attribute("data-updates")) > 1  # arrived in parts
        assert page.locator("#pg-answer-box").inner_text().strip()
        ttft, itl = page.locator("#pg-ttft").inner_text(), page.locator("#pg-itl").inner_text()
        assert ttft.endswith(" ms") and float(ttft.split()[0]) > 0
        assert "ms" in itl and float(itl.split()[0]) >= 0
        prefill, decode = page.locator("#pg-prefill").inner_text(), page.locator("#pg-decode").inner_text()
        assert any(f"({k}," in prefill for k in keys if k.startswith("p")), prefill
        assert any(f"({k}," in decode for k in keys if k.startswith("d")), decode
        assert page.locator("#pg-tokens").inner_text().endswith("/ 24")
        assert "curl" in page.locator("#pg-curl").text_content()
        assert page.locator("#pg-history .pg-turn").count() == 2  # the chat keeps its turns
        page.fill("#pg-text", "And a second question")
        page.click("#pg-send")
        expect(page.locator("#pg-history .pg-turn")).to_have_count(4, timeout=60000)
        tags = page.locator("#pg-history .pg-served").all_inner_texts()  # each answer says who served it
        assert len(tags) == 2 and all("→" in t and "TTFT" in t for t in tags), tags
        assert all(any(k in t.split("→")[0] for k in keys if k.startswith("p")) for t in tags), tags
        assert all(any(k in t.split("→")[1] for k in keys if k.startswith("d")) for t in tags), tags
        assert page.locator("#pg-log-rows tr").count() == 2
        assert page.locator("#pg-log-rows tr").first.locator("td").last.inner_text() == "ok"
        page.screenshot(path=str(tmp_path / "playground.png"), full_page=True)
        print(f"\nplayground figures: TTFT {ttft}, ITL p50/mean {itl}, P {prefill}, D {decode}")
        assert not errors, errors
    finally:
        assert run_job_now(deployment_stop, deployment, operator).status == "successful"
