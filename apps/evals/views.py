"""Eval pages: the run list, launching a run or a sweep, one run live and its results, comparing runs, datasets.
Thin: run_settings and the services validate and write, selectors read; every error is shown on its field."""

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.accounts.access import operator_required, viewer_required
from apps.deployments.models import Deployment

from . import charts, forms, result_tables
from .choices import EvalMode
from .datasets import MAX_UPLOAD_BYTES, dataset_choices, datasets_root, uploads_root
from .downloads import run_folder, zip_response
from .install_status import local_install_problem
from .models import EvalRun, EvalSweep
from .run_settings import BadRunSettings, RunSettings, parse_concurrencies
from .selectors import compare_runs, runs_list, samples_of
from .services import (
    EvalStateError,
    eval_cancel,
    eval_dataset_upload,
    eval_payload,
    eval_resume,
    eval_run_create,
    eval_sweep_create,
)

RUNS_PER_PAGE = 50
SAMPLES_PER_PAGE = 25
MAX_COMPARED = 8
LIGHT_RUN = ("perf_requests", "revision_spec")  # what lists never show


def _deployment_from(raw: str) -> Deployment | None:
    """The deployment a form or link names; a malformed or unknown id is a 404."""
    if not raw:
        return None
    if not raw.isdecimal():
        raise Http404("no such deployment")
    return get_object_or_404(Deployment.objects.select_related("cluster"), pk=int(raw))


@viewer_required
def eval_list(request):
    raw = request.GET.get("deployment", "")
    deployment_id = int(raw) if raw.isdecimal() else None
    page = Paginator(runs_list(deployment_id=deployment_id), RUNS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "evals/list.html", {
        "page": page, "deployment_id": deployment_id, "install_problem": local_install_problem(),
        "deployments": Deployment.objects.order_by("name").values("pk", "name")})  # audited: never deferred


def _first_runnable() -> str:
    return next((c.key for c in dataset_choices() if c.runnable), "")


def _run_form(request, *, fields, template, create, initial=None):
    """The launch and sweep forms: GET shows defaults, POST validates everything at once and creates."""
    posted = request.method == "POST"
    source = request.POST if posted else request.GET
    deployment = _deployment_from(source.get("deployment", ""))
    dataset = source.get("dataset", "") if posted else (request.GET.get("dataset") or _first_runnable())
    values = forms.values_from_post(request.POST, fields) if posted else forms.initial_values(fields, initial)
    errors = {}
    if posted:
        if deployment is None:
            errors["deployment"] = "choose the deployment to evaluate"
        result, errors = create(deployment, forms.settings_dict(values, dataset), values, errors)
        if result is not None:
            return result
    return render(request, template, {
        "fields": forms.bind(fields, values, errors), "errors": errors,
        "other_errors": forms.other_errors(errors, fields), "deployments": forms.deployment_options(
            str(deployment.pk) if deployment else ""), "datasets": forms.dataset_options(dataset),
        "install_problem": local_install_problem(), "sim_tokenizer": settings.PDCP_SIM_TOKENIZER,
    }, status=400 if errors else 200)


@operator_required
def eval_new(request):
    def create(deployment, data, values, errors):
        try:
            run_settings = RunSettings.from_dict(data)
        except BadRunSettings as exc:
            return None, {**exc.errors, **errors}
        if errors:
            return None, errors
        try:
            run = eval_run_create(deployment=deployment, user=request.user, settings=run_settings)
        except BadRunSettings as exc:
            return None, exc.errors
        messages.success(request, f"eval #{run.pk} queued")
        return redirect("evals:detail", pk=run.pk), {}

    return _run_form(request, fields=forms.LAUNCH_FIELDS, template="evals/new.html", create=create)


@operator_required
def sweep_new(request):
    def create(deployment, data, values, errors):
        errors = dict(errors)
        for check in (lambda: parse_concurrencies(values["concurrencies"]),
                      lambda: RunSettings.from_dict({**data, "mode": EvalMode.PERFORMANCE})):
            try:
                check()
            except BadRunSettings as exc:
                errors.update(exc.errors)
        if errors:
            return None, errors
        try:
            sweep = eval_sweep_create(deployment=deployment, user=request.user, settings=data,
                                      concurrencies=values["concurrencies"])
        except BadRunSettings as exc:
            return None, exc.errors
        messages.success(request, f"sweep #{sweep.pk} queued: {len(sweep.concurrencies)} runs, one after another")
        return redirect("evals:sweep", pk=sweep.pk), {}

    return _run_form(request, fields=forms.SWEEP_FIELDS, template="evals/sweep_new.html", create=create,
                     initial=forms.SWEEP_INITIAL)


@viewer_required
def eval_detail(request, pk):
    run = get_object_or_404(EvalRun.objects.select_related("deployment", "job", "created_by", "sweep"), pk=pk)
    wrong_only = request.GET.get("wrong") == "1"
    samples = Paginator(samples_of(run, wrong_only=wrong_only), SAMPLES_PER_PAGE).get_page(request.GET.get("page"))
    payload = eval_payload(run)
    return render(request, "evals/detail.html", {
        "run": run, "payload": payload, "samples": samples, "wrong_only": wrong_only,
        "sample_count": run.samples.count(), "wrong_count": run.samples.filter(correct=False).count(),
        "elapsed": charts.duration_text(payload["elapsed_s"]), "remaining": charts.duration_text(payload["remaining_s"]),
        "accuracy_rows": result_tables.accuracy_rows(run), "perf_sections": result_tables.performance_sections(run),
        "chart_data": charts.run_chart_data(run) if run.perf_requests else None,
        "has_output": run_folder(run.pk) is not None})


@viewer_required
def eval_state(request, pk):
    return JsonResponse(eval_payload(get_object_or_404(EvalRun, pk=pk)))


@require_POST
@operator_required
def eval_cancel_action(request, pk):
    run = get_object_or_404(EvalRun.objects.select_related("job"), pk=pk)
    try:
        eval_cancel(run=run, user=request.user)
        messages.info(request, "cancel requested: ais_bench is being stopped")
    except EvalStateError as exc:
        messages.error(request, str(exc))
    return redirect("evals:detail", pk=run.pk)


@require_POST
@operator_required
def eval_resume_action(request, pk):
    run = get_object_or_404(EvalRun, pk=pk)
    try:
        eval_resume(run=run, user=request.user)
        messages.success(request, "resumed: only the requests not answered yet are sent")
    except EvalStateError as exc:
        messages.error(request, str(exc))
    return redirect("evals:detail", pk=run.pk)


@viewer_required
def eval_download(request, pk):
    run = get_object_or_404(EvalRun, pk=pk)
    root = run_folder(run.pk)
    if root is None:
        raise Http404("this run has no output folder on the control plane yet")
    return zip_response(run.pk, root)


def _compare_ids(values: list[str]) -> list[int]:
    ids = []
    for token in ",".join(values).split(","):
        token = token.strip()
        if not token:
            continue
        if not token.isdecimal():
            raise Http404("runs are named by their numbers, e.g. ?runs=3,5,9")
        if int(token) not in ids:
            ids.append(int(token))
    return ids


@viewer_required
def eval_compare(request):
    raw = request.GET.getlist("runs")
    ids = _compare_ids(raw)
    if len(raw) > 1:  # the list's checkboxes: the oldest run is the baseline
        return redirect(f"{reverse('evals:compare')}?runs={','.join(map(str, sorted(ids)))}")
    if not 2 <= len(ids) <= MAX_COMPARED:
        return render(request, "evals/compare.html", {
            "problem": f"pick 2 to {MAX_COMPARED} runs to compare (the first is the baseline)"}, status=400)
    found = EvalRun.objects.defer("perf_requests").in_bulk(ids)
    missing = [i for i in ids if i not in found]
    if missing:
        raise Http404(f"no eval run #{missing[0]}")
    comparison = compare_runs([found[i] for i in ids])
    return render(request, "evals/compare.html", {
        "baseline": comparison.runs[0], "tables": charts.compare_tables(comparison), "notes": comparison.notes,
        "changes": comparison.topology_changes})


@viewer_required
def sweep_list(request):
    page = Paginator(EvalSweep.objects.select_related("created_by"), RUNS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "evals/sweeps.html", {"page": page})


@viewer_required
def sweep_detail(request, pk):
    sweep = get_object_or_404(EvalSweep.objects.select_related("created_by", "deployment"), pk=pk)
    runs = list(sweep.runs.select_related("job").defer(*LIGHT_RUN).order_by("concurrency"))
    context = {"sweep": sweep, "runs": runs, "unfinished": any(not r.is_finished for r in runs),
               "chart_data": charts.sweep_chart_data(runs)}
    if request.headers.get("HX-Request"):
        return render(request, "evals/_sweep_runs.html", context)
    return render(request, "evals/sweep_detail.html", context)


def _datasets_page(request, form=None, errors=None):
    return render(request, "evals/datasets.html", {
        "choices": dataset_choices(), "datasets_root": datasets_root(), "uploads_root": uploads_root(),
        "form": form or {"name": "", "family": "aime", "description": ""}, "errors": errors or {},
        "families": forms.UPLOAD_FAMILIES, "max_mb": MAX_UPLOAD_BYTES >> 20},
                  status=400 if errors else 200)


@viewer_required
def dataset_list(request):
    return _datasets_page(request)


@require_POST
@operator_required
def dataset_upload(request):
    form = {name: request.POST.get(name, "").strip() for name in ("name", "family", "description")}
    upload = request.FILES.get("file")
    errors = {}
    if upload is not None and upload.size > MAX_UPLOAD_BYTES:
        errors["file"] = f"the file is larger than {MAX_UPLOAD_BYTES >> 20} MB"
    if not errors:
        try:
            dataset = eval_dataset_upload(name=form["name"], family=form["family"], description=form["description"],
                                          data=upload.read() if upload else b"", user=request.user)
        except BadRunSettings as exc:
            errors = exc.errors
        else:
            messages.success(request, f"dataset {dataset.name} stored: {dataset.lines} items")
            return redirect("evals:datasets")
    if upload is None:
        errors["file"] = "choose a JSONL file: one {\"question\": ..., \"answer\": ...} object per line"
    return _datasets_page(request, form, errors)
