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
