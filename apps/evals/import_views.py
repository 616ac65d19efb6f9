"""The import page: an AISBench result made elsewhere (a zip, a summary file or pasted console output) becomes a run
marked imported. Thin: run_import reads and stores, and every error is shown on its field."""

from django.contrib import messages
from django.shortcuts import redirect, render

from apps.accounts.access import operator_required
from apps.deployments.models import Deployment

from .datasets import dataset_choices
from .run_import import EXTERNAL, MAX_IMPORT_BYTES, ImportTarget, eval_import
from .run_settings import BadRunSettings

FIELDS = ("deployment", "revision", "label", "concurrency", "max_out_len", "dataset", "note", "text")
NUMBERS = ("revision", "concurrency", "max_out_len")


def _page(request, form: dict, errors: dict):
    return render(request, "evals/import.html", {
        "form": form, "errors": errors, "external": EXTERNAL, "max_mb": MAX_IMPORT_BYTES >> 20,
        "datasets": [c.key for c in dataset_choices()],
        "deployments": Deployment.objects.order_by("name").values("pk", "name")}, status=400 if errors else 200)


def _target(form: dict) -> ImportTarget:
    errors, numbers = {}, {}
    for name in NUMBERS:
        raw = form[name]
        if raw and not raw.isdecimal():
            errors[name] = f"{raw[:20]!r} is not a whole number"
        numbers[name] = int(raw) if raw.isdecimal() else None
    deployment = None
    if form["deployment"]:
        deployment = Deployment.objects.filter(pk=int(form["deployment"])).first() if form[
            "deployment"].isdecimal() else None
        if deployment is None:
            errors["deployment"] = "no such deployment"
    if errors:
        raise BadRunSettings(errors)
    return ImportTarget(deployment=deployment, revision_number=numbers["revision"], label=form["label"],
                        concurrency=numbers["concurrency"], max_out_len=numbers["max_out_len"],
                        ignore_eos=form["ignore_eos"], dataset_key=form["dataset"], note=form["note"])


@operator_required
def eval_import_page(request):
    if request.method != "POST":
        return _page(request, {name: "" for name in FIELDS} | {"ignore_eos": False}, {})
    form = {name: request.POST.get(name, "").strip() for name in FIELDS} | {
        "ignore_eos": request.POST.get("ignore_eos") == "on", "text": request.POST.get("text", "")}
    upload = request.FILES.get("file")
    try:
        if upload is not None and upload.size > MAX_IMPORT_BYTES:
            raise BadRunSettings({"file": f"{upload.name} is larger than {MAX_IMPORT_BYTES >> 20} MB"})
        run = eval_import(user=request.user, target=_target(form), name=upload.name if upload else "",
                          data=upload.read() if upload else None, text=form["text"])
    except BadRunSettings as exc:
        return _page(request, form, exc.errors)
    messages.success(request, f"imported as eval #{run.pk}: {run.imported_from}")
    return redirect("evals:detail", run.pk)
