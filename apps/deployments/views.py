"""Operator pages for deployments: list, detail, editor, plan, diff, processes and logs; job buttons lead to the
live job page. Thin: services and selectors do the work, every failure is shown in place."""

import re

import yaml
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

import plainyaml
from apps.accounts.access import operator_required, viewer_required
from apps.inventory.models import Cluster
from apps.jobs.models import Job

from .choices import HbmVerdict
from .inventory_lookup import cluster_facts
from .job_params import JobParams, known_names
from .logs import LogUnavailable, process_log_tail
from .models import Deployment, Process, Revision
from .revision_checks import RevisionInvalid, name_problem
from .revision_plan import deployment_plan, revision_diff
from .runtimes import plan_start_lines
from .selectors import deployments_with_summary, processes_of, revisions_of
from .services import (
    BadJobParams,
    DeploymentBusy,
    deployment_create,
    deployment_deploy,
    deployment_preflight,
    deployment_refresh,
    deployment_restart,
    deployment_rollback,
    deployment_rolling_restart,
    deployment_stop,
    revision_activate,
    revision_create,
)
from .spec_form import form_context, spec_form_save, state_from_post, state_from_spec
from .topology import plan_to_text
from .topology.plan_view import plan_view

NEW_TEMPLATE = """# A PD topology: see examples/reference-topology-fixed.yaml for every field.
launch_profile: sim
# run_dir: left out, it is <root>/<deployment name> (sim: /home/simnode/pdcp-runs, vllm-ascend: /var/lib/pdcp)
model:
  path: /models/Qwen3-235B-A22B
  served_name: qwen3-235b
  profile: {layers: 94, kv_heads: 4, head_dim: 128, dtype: bfloat16, attention_heads: 64}
instances:
  - {name: p0, role: prefill, node: node0, tp: 16, dp: 1, api_port: 7100, kv_port: 30000}
  - {name: d0, role: decode, node: node2, tp: 4, dp: 4, dp_rpc_port: 12321, api_port: 7100, kv_port: 30200}
proxy: {node: proxy, port: 1999, policy: least_conn}
"""


def _problems_in_place(exc: RevisionInvalid, text: str) -> list[dict]:
    """Each problem with the YAML line it belongs to (instance block, then the field inside it), when findable."""
    data = None
    try:
        data = plainyaml.load(text)
    except yaml.YAMLError:
        pass
    lines = text.splitlines()
    out = []
    for p in exc.problems:
        named = name_problem(p, data if isinstance(data, dict) else None).as_dict()
        named["line"] = _line_of(lines, named)
        out.append(named)
    return out


def _line_of(lines: list[str], problem: dict) -> int | None:
    m = re.search(r"line (\d+)", problem["message"]) if problem["path"] == "yaml" else None
    if m:
        return int(m.group(1))
    start = 0
    if problem["instance"]:
        pattern = re.compile(rf"\bname:\s*['\"]?{re.escape(problem['instance'])}['\"]?\s*[,}}]?\s*$|"
                             rf"\bname:\s*['\"]?{re.escape(problem['instance'])}['\"]?\s*,")
        hit = next((i for i, ln in enumerate(lines) if pattern.search(ln)), None)
        if hit is None:
            return None
        start = hit
    field = (problem["field"] or problem["path"]).split(".")[-1].split("[")[0]
    for i in range(start, min(len(lines), start + 40 if problem["instance"] else len(lines))):
        if re.search(rf"(^|[\s{{,]){re.escape(field)}:", lines[i]):
            return i + 1
    return start + 1 if problem["instance"] else None


@viewer_required
def deployment_list(request):
    return render(request, "deployments/list.html", {"deployments": deployments_with_summary()})


@operator_required
def deployment_new(request):
    clusters = Cluster.objects.order_by("name")
    form = {"name": request.POST.get("name", ""), "cluster": request.POST.get("cluster", ""),
            "description": request.POST.get("description", ""), "yaml_text": request.POST.get("yaml_text", NEW_TEMPLATE)}
    problems, errors = [], {}
    if request.method == "POST":
        cluster = clusters.filter(pk=form["cluster"]).first() if form["cluster"].isdecimal() else None
        if cluster is None:
            errors["cluster"] = "choose a cluster"
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$", form["name"]):
            errors["name"] = "use letters, digits, '.', '_' or '-' (at most 63)"
        elif Deployment.objects.filter(name=form["name"]).exists():
            errors["name"] = "a deployment with this name exists"
        if not errors:
            try:
                deployment = deployment_create(name=form["name"], cluster=cluster, description=form["description"],
                                               yaml_text=form["yaml_text"], user=request.user)
                messages.success(request, f"deployment {deployment.name} created with revision 1")
                return redirect("deployments:detail", pk=deployment.pk)
            except RevisionInvalid as exc:
                problems = _problems_in_place(exc, form["yaml_text"])
    return render(request, "deployments/edit.html", {"form": form, "clusters": clusters, "problems": problems,
                                                     "errors": errors, "deployment": None},
                  status=400 if problems or errors else 200)


@viewer_required
def deployment_detail(request, pk):
    deployment = get_object_or_404(deployments_with_summary(), pk=pk)
    active = deployment.active_revision
    instances = [i["name"] for i in (active.spec.get("instances", []) if active else [])]
    jobs = Job.objects.filter(target_type="deployments.deployment", target_id=deployment.pk).select_related(
        "created_by")[:10]
    return render(request, "deployments/detail.html", {
        "deployment": deployment, "active": active, "revisions": revisions_of(deployment)[:30],
        "processes": processes_of(deployment), "jobs": jobs, "instances": instances})


@operator_required
def deployment_edit(request, pk):
    deployment = get_object_or_404(Deployment.objects.select_related("cluster"), pk=pk)
    base = deployment.active_revision
    text = request.POST.get("yaml_text", base.yaml_text if base else NEW_TEMPLATE)
    comment = request.POST.get("comment", "")
    problems = []
    if request.method == "POST":
        try:
            revision = revision_create(deployment=deployment, user=request.user, yaml_text=text, comment=comment,
                                       activate=request.POST.get("activate") == "on")
            messages.success(request, f"revision {revision.number} saved"
                             + (" and activated" if revision.is_active else " (not active: activate it to deploy)"))
            return redirect("deployments:detail", pk=deployment.pk)
        except RevisionInvalid as exc:
            problems = _problems_in_place(exc, text)
    return render(request, "deployments/edit.html", {
        "deployment": deployment, "form": {"yaml_text": text, "comment": comment}, "problems": problems,
        "errors": {}}, status=400 if problems else 200)


@operator_required
def deployment_edit_form(request, pk):
    """The same revision as the YAML editor would save, edited field by field; problems sit on their field."""
    deployment = get_object_or_404(Deployment.objects.select_related("cluster"), pk=pk)
    comment, activate = request.POST.get("comment", ""), request.POST.get("activate") == "on"
    problems = []
    if request.method != "POST":
        base = deployment.active_revision
        state = state_from_spec(base.spec if base else plainyaml.load(NEW_TEMPLATE))
    else:
        state = state_from_post(request.POST)
        if "add_instance" in request.POST:
            state.add_instance_row()
        elif "add_server" in request.POST:
            state.add_server_row()
        else:
            revision, problems = spec_form_save(deployment=deployment, user=request.user, state=state,
                                                comment=comment, activate=activate)
            if revision is not None:
                messages.success(request, f"revision {revision.number} saved" + (
                    " and activated" if revision.is_active else " (not active: activate it to deploy)"))
                return redirect("deployments:detail", pk=deployment.pk)
    facts = cluster_facts(deployment.cluster)
    context = form_context(state, problems, npu_nodes=sorted(n for n, f in facts.items() if f.npu_count),
                           all_nodes=sorted(facts))
    context.update(deployment=deployment, problems=problems, comment=comment, activate=activate)
    return render(request, "deployments/edit_form.html", context, status=400 if problems else 200)


@viewer_required
def deployment_plan_page(request, pk):
    deployment = get_object_or_404(Deployment.objects.select_related("cluster"), pk=pk)
    number = request.GET.get("revision", "")
    revision = (get_object_or_404(Revision, deployment=deployment, number=int(number)) if number.isdecimal()
                else deployment.active_revision)
    context = {"deployment": deployment, "revision": revision, "problems": [], "stages": [], "text": ""}
    if revision is None:
        context["problems"] = [{"path": "revision", "instance": None, "field": "", "message": "no revision yet",
                                "suggestion": "save a spec"}]
    else:
        try:
            _spec, plan = deployment_plan(deployment, revision)
            hbm = [{**fit.as_dict(), "colour": HbmVerdict.colour_of(fit.status)} for fit in plan.hbm]
            lines = plan_start_lines(plan, deployment=deployment.name, revision=revision.number)
            context.update(stages=[] if plan.mindie else plan_view(plan, lines), text=plan_to_text(plan, lines),
                           profile=plan.profile, warnings=plan.warnings, hbm=hbm,
                           mindie=plan.mindie, pods=plan.processes if plan.mindie else ())
        except RevisionInvalid as exc:
            context["problems"] = [name_problem(p, revision.spec).as_dict() for p in exc.problems]
    return render(request, "deployments/plan.html", context)


@viewer_required
def deployment_diff_page(request, pk):
    deployment = get_object_or_404(Deployment, pk=pk)
    revisions = {r.number: r for r in deployment.revisions.all()}
    old, new = request.GET.get("old", ""), request.GET.get("new", "")
    active = next((r for r in revisions.values() if r.is_active), None)
    old_r = revisions.get(int(old)) if old.isdecimal() else None
    new_r = revisions.get(int(new)) if new.isdecimal() else active
    changes = revision_diff(old_r, new_r) if old_r and new_r else []
    return render(request, "deployments/diff.html", {"deployment": deployment, "old": old_r, "new": new_r,
                                                     "changes": changes, "numbers": sorted(revisions, reverse=True)})


@require_POST
@operator_required
def deployment_activate(request, pk, number):
    deployment = get_object_or_404(Deployment.objects.select_related("cluster"), pk=pk)
    revision = get_object_or_404(Revision, deployment=deployment, number=number)
    if request.POST.get("deploy") == "1":
        return _job_redirect(request, deployment, lambda deployment, **kw: deployment_rollback(revision=revision, **kw),
                             {})
    try:
        revision_activate(revision=revision, user=request.user)
    except RevisionInvalid as exc:
        messages.error(request, f"revision {number} does not validate now: {'; '.join(map(str, exc.problems))}")
        return redirect("deployments:detail", pk=pk)
    messages.success(request, f"revision {number} is now active")
    return redirect("deployments:detail", pk=pk)


def _job_params(request) -> JobParams:
    """The job options the form sent (a checked box sends "on"), read as the API and the services read them."""
    return JobParams.from_dict({name: request.POST[name] for name in known_names() if name in request.POST})


def _job_redirect(request, deployment, starter, extra):
    try:
        job = starter(deployment=deployment, user=request.user, params=_job_params(request), **extra)
    except RevisionInvalid as exc:
        messages.error(request, f"the active revision does not validate now: {'; '.join(map(str, exc.problems))}")
    except (BadJobParams, DeploymentBusy) as exc:
        messages.error(request, str(exc))
    else:
        return redirect("jobs:detail", pk=job.pk)
    return redirect("deployments:detail", pk=deployment.pk)


@require_POST
@operator_required
def deployment_job(request, pk, kind):
    deployment = get_object_or_404(Deployment.objects.select_related("cluster"), pk=pk)
    if kind == "restart":
        return _job_redirect(request, deployment, deployment_restart, {"instance": request.POST.get("instance", "")})
    if kind == "rolling-restart":
        return _job_redirect(request, deployment, deployment_rolling_restart, {"role": request.POST.get("role", "")})
    starter = {"preflight": deployment_preflight, "deploy": deployment_deploy, "stop": deployment_stop,
               "refresh": deployment_refresh}.get(kind)
    if starter is None:
        messages.error(request, f"unknown action {kind}")
        return redirect("deployments:detail", pk=pk)
    return _job_redirect(request, deployment, starter, {})


@viewer_required
def deployment_export(request, pk):
    deployment = get_object_or_404(Deployment, pk=pk)
    revision = deployment.active_revision
    return HttpResponse(revision.yaml_text if revision else "", content_type="application/yaml",
                        headers={"Content-Disposition": f'attachment; filename="{deployment.name}.yaml"'})


@viewer_required
def process_log(request, pk):
    process = get_object_or_404(Process.objects.select_related("deployment", "node__credential"), pk=pk)
    lines = request.GET.get("lines", "200")
    lines = int(lines) if lines.isdecimal() else 200
    text, error = "", None
    try:
        text = process_log_tail(process, lines=lines)
    except LogUnavailable as exc:
        error = str(exc)
    template = "deployments/_log.html" if request.headers.get("HX-Request") else "deployments/log.html"
    return render(request, template, {"process": process, "text": text, "error": error, "lines": lines})
