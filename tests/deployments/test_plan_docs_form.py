"""The plan page and API show each process as the docs write it, the wrapper folded away (issue 11 item 5)."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from apps.deployments.revision_plan import deployment_plan
from apps.deployments.topology import Plan
from apps.deployments.topology.plan_view import plan_view

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser_for(make_user):
    def login(role):
        client = Client()
        client.force_login(make_user(role, username=f"plan-{role}"))
        return client

    return login


def blocks(page: str, tag: str, cls: str) -> list[str]:
    """The unescaped text of every <tag class="cls">...</tag> (no nesting of the same tag inside)."""
    return [html.unescape(m) for m in re.findall(rf'<{tag} class="{cls}"[^>]*>(.*?)</{tag}>', page, re.S)]


def test_each_process_is_shown_as_the_docs_write_it(browser_for, deployment):
    page = browser_for("viewer").get(f"/deployments/{deployment.pk}/plan/").content.decode()
    processes = [p for stage in plan_view(deployment_plan(deployment)[1]) for p in stage.processes]
    assert blocks(page, "pre", "plan-docs") == [p.text for p in processes]
    p0 = next(p for p in processes if p.key == "p0-dp0")
    assert any(line.startswith("export ") for line in p0.text.splitlines())
    assert "  --kv-transfer-config '{\n" in p0.text and "\n  }'" in p0.text  # JSON pretty-printed under its flag
    assert page.count("data-copy") == len(processes)  # a Copy button per process


def test_the_wrapper_is_folded_away_with_the_exact_line(browser_for, deployment):
    page = browser_for("viewer").get(f"/deployments/{deployment.pk}/plan/").content.decode()
    processes = [p for stage in plan_view(deployment_plan(deployment)[1]) for p in stage.processes]
    folded = [html.unescape(m) for m in re.findall(
        r'<details class="plan-wrapper">.*?<pre class="command">(.*?)</pre></details>', page, re.S)]
    assert folded == [p.start_line for p in processes]
    outside = re.sub(r"<details.*?</details>", "", page, flags=re.S)
    assert "setsid nohup" not in outside and "pdcp_dirs" not in outside and "PDCP_PROCESS" not in outside


def test_copy_script_comes_from_static(browser_for, deployment):
    page = browser_for("viewer").get(f"/deployments/{deployment.pk}/plan/").content.decode()
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', page)
    assert "/static/js/plan-copy.js" in scripts and all(s.startswith("/static/") for s in scripts)
    assert finders.find("js/plan-copy.js") and finders.find("css/plan.css")


def test_plan_warnings_are_shown(browser_for, deployment, monkeypatch):
    import apps.deployments.views as views

    spec, plan = deployment_plan(deployment)
    warned = Plan(plan.profile, plan.stages, warnings=("MOONCAKE_MASTER is set but <nothing> reads it",))
    monkeypatch.setattr(views, "deployment_plan", lambda *a, **k: (spec, warned))
    page = browser_for("viewer").get(f"/deployments/{deployment.pk}/plan/").content.decode()
    assert 'id="warnings"' in page and "MOONCAKE_MASTER is set but &lt;nothing&gt; reads it" in page


def test_api_plan_lists_processes_in_docs_form(api_client_for, deployment):
    body = api_client_for("viewer").get(f"/api/deployments/{deployment.pk}/plan/").json()
    plan = deployment_plan(deployment)[1]
    stages = plan_view(plan)
    assert [p["key"] for p in body["processes"]] == [p.key for s in stages for p in s.processes]
    assert [p["stage"] for p in body["processes"]] == [s.name for s in stages for _ in s.processes]
    first = body["processes"][0]
    view = stages[0].processes[0]
    assert first["exports"] == list(view.exports) and first["command"] == list(view.command)
    assert first["text"] == view.text and first["start_line"] == view.start_line
    assert first["files"] == [f.as_dict() for f in view.files]
    assert body["warnings"] == list(plan.warnings) and "setsid nohup" in body["text"]
    assert all(p["start_line"] in body["text"] and p["text"] in body["text"] for p in body["processes"])


def test_schema_documents_the_plan_processes(api_client_for):
    schema = api_client_for("viewer").get("/api/schema/?format=json").json()
    process = schema["components"]["schemas"]["PlanDocsProcess"]["properties"]
    assert {"exports", "command", "files", "text", "start_line"} <= set(process)
    plan = schema["components"]["schemas"]["PlanWithProcesses"]["properties"]
    assert plan["processes"]["items"]["$ref"].endswith("/PlanDocsProcess")
    assert {"revision", "profile", "text", "stages", "warnings"} <= set(plan)


# --- runtime: container: the engines' line is their `docker run`, the pool and the proxy keep the host line ---------
@pytest.fixture
def container_deployment(ref_cluster, make_user):
    from apps.deployments.services import deployment_create
    from tests.deployments.container_fixtures import EXAMPLES, allowlist_data

    ref_cluster.allowlist = allowlist_data()
    ref_cluster.save()
    return deployment_create(name="ref-containers", cluster=ref_cluster, user=make_user("operator", "c-owner"),
                             yaml_text=(EXAMPLES / "reference-topology-containers.yaml").read_text())


def _container_lines(deployment) -> dict[str, str]:
    from apps.deployments.runtimes import container_command as cc

    plan = deployment_plan(deployment)[1]
    revision = deployment.active_revision.number
    return {p.key: cc.start_command(plan.container, p, deployment=deployment.name, revision=revision)
            for p in plan.processes if plan.container.runs(p.key)}


def test_a_container_plan_page_shows_each_engines_docker_run(browser_for, container_deployment):
    page = browser_for("viewer").get(f"/deployments/{container_deployment.pk}/plan/").content.decode()
    folded = dict(re.findall(r'<div class="plan-process" data-key="([^"]+)">.*?<details class="plan-wrapper">.*?'
                             r'<pre class="command">(.*?)</pre></details>', page, re.S))
    engines = _container_lines(container_deployment)
    assert engines and set(engines) < set(folded)
    for key, line in engines.items():
        assert html.unescape(folded[key]) == line
        assert f"--name pdcp-ref-containers-{key}" in line and "setsid" not in line
    for key in set(folded) - set(engines):  # kv-pool and proxy stay host processes
        assert "setsid nohup" in html.unescape(folded[key]) and "docker" not in folded[key]
    assert page.count("the container's run (image, devices, mounts, env)") == len(engines)


def test_a_container_plan_through_the_api_says_which_processes_are_containers(api_client_for, container_deployment):
    body = api_client_for("viewer").get(f"/api/deployments/{container_deployment.pk}/plan/").json()
    engines = _container_lines(container_deployment)
    by_key = {p["key"]: p for p in body["processes"]}
    assert {k for k, p in by_key.items() if p["in_container"]} == set(engines)
    assert all(by_key[k]["start_line"] == line and line in body["text"] for k, line in engines.items())
    commands = {p["key"]: p["command"] for s in body["stages"] for n in s["nodes"] for p in n["processes"]}
    assert all(commands[k] == line for k, line in engines.items())
    assert f"# {next(iter(engines))} exactly as a deploy starts it as a container:" in body["text"]
