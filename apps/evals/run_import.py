"""Importing an AISBench result made elsewhere (an output folder as a zip, a summary file, pasted console output) as
an EvalRun marked imported, tied to a deployment revision or "external". The page, the API and `pdcp eval import`
call eval_import; a refused import raises BadRunSettings naming the field (a bad file: "file", naming its line and
column) and stores nothing."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from apps.deployments.models import Deployment

from .aisbench.output_parser import ImportedResults, OutputError, read_pasted, read_upload
from .choices import EvalMode, EvalSource, EvalStatus
from .datasets import dataset_choice
from .hosts import local_run_dir
from .models import EvalRun, EvalSample, slug_validator
from .results import accuracy_entry, headline, merge_entries, performance_entry, request_rows, sample_rows
from .run_settings import BadRunSettings

EXTERNAL = "external"
MAX_IMPORT_BYTES = 200 * 1024 * 1024
MAX_PASTED_CHARS = 2_000_000  # console tables are small; a form field or JSON body stops near 2.5 MB
MAX_NOTE = 300


@dataclass
class ImportTarget:
    """What the imported run is tied to: a deployment and one of its revisions, or a label for an outside system."""

    deployment: Deployment | None = None
    revision_number: int | None = None  # None: the deployment's active revision
    label: str = ""  # without a deployment; default "external"
    concurrency: int | None = None  # default: the Max Concurrency AISBench measured
    max_out_len: int | None = None  # default: the longest answer measured (exact for a fixed output length)
    ignore_eos: bool = False
    dataset_key: str = ""  # a catalogue or upload key, so the advisor groups it with our runs; default imported:<ds>
    note: str = ""


def read_import(*, name: str = "", data: bytes | None = None, text: str = "") -> ImportedResults:
    """The results in an uploaded file, or else in pasted text; BadRunSettings naming "file" or "text" otherwise."""
    if data is not None:
        if len(data) > MAX_IMPORT_BYTES:
            raise BadRunSettings({"file": f"{name} is larger than {MAX_IMPORT_BYTES // 2**20} MB"})
        try:
            return read_upload(name or "upload", data)
        except OutputError as exc:
            raise BadRunSettings({"file": str(exc)}) from None
    if not text.strip():
        raise BadRunSettings({"file": "upload an AISBench output folder (zip) or a summary file, or paste the "
                                      "console output"})
    if len(text) > MAX_PASTED_CHARS:
        raise BadRunSettings({"text": f"the pasted text is longer than {MAX_PASTED_CHARS:,} characters"})
    try:
        return read_pasted(text)
    except OutputError as exc:
        raise BadRunSettings({"text": str(exc)}) from None


def _tie(target: ImportTarget) -> dict:
    if target.deployment is None:
        label = target.label.strip() or EXTERNAL
        try:
            slug_validator(label)
        except Exception:
            raise BadRunSettings({"label": f"{label[:60]!r}: {slug_validator.message}"}) from None
        if target.revision_number is not None:
            raise BadRunSettings({"revision": "a revision needs a deployment"})
        return {"deployment": None, "deployment_name": label, "revision": None, "revision_number": 0,
                "revision_spec": {}, "served_model": ""}
    if target.label.strip():
        raise BadRunSettings({"label": "give a deployment or a label for an outside system, not both"})
    deployment = target.deployment
    if target.revision_number is None:
        revision = deployment.active_revision
        if revision is None:
            raise BadRunSettings({"revision": f"{deployment.name} has no active revision: name one"})
    else:
        revision = deployment.revisions.filter(number=target.revision_number).first()
        if revision is None:
            raise BadRunSettings({"revision": f"{deployment.name} has no revision r{target.revision_number}"})
    return {"deployment": deployment, "deployment_name": deployment.name, "revision": revision,
            "revision_number": revision.number, "revision_spec": revision.spec,
            "served_model": str(revision.spec.get("model", {}).get("served_name", ""))}


def _dataset_key(target: ImportTarget, first_dataset: str) -> str:
    if not target.dataset_key:
        return f"imported:{first_dataset}"[:80]
    if dataset_choice(target.dataset_key) is None:
        raise BadRunSettings({"dataset": f"unknown dataset {target.dataset_key!r}: a key of Evaluations → Datasets, "
                                         "or empty"})
    return target.dataset_key


def _mode(imported: ImportedResults) -> str:
    if imported.accuracy and imported.performance:
        return EvalMode.BOTH
    return EvalMode.ACCURACY if imported.accuracy else EvalMode.PERFORMANCE


def _measured_load(imported: ImportedResults, target: ImportTarget) -> tuple[int, int]:
    """(concurrency, max_out_len): given, else read from the first performance result, else 1 and 0 (unknown)."""
    perf = imported.performance[0] if imported.performance else None
    concurrency, max_out_len = target.concurrency, target.max_out_len
    if concurrency is None:
        measured = perf.metrics.get("Max Concurrency") if perf else None
        concurrency = max(1, round(measured.value)) if measured and measured.value else 1
    if max_out_len is None:
        tokens = perf.distribution("OutputTokens") if perf else None
        longest = tokens.stats.get("max") if tokens else None
        max_out_len = round(longest) if longest else 0
    for field, value, low, high in (("concurrency", concurrency, 1, 1000), ("max_out_len", max_out_len, 0, 1_000_000)):
        if not low <= value <= high:
            raise BadRunSettings({field: f"must be between {low} and {high:,}"})
    return concurrency, max_out_len


def _entries(imported: ImportedResults) -> list[dict]:
    entries = merge_entries([], "accuracy", {(r.model, r.dataset): accuracy_entry(r) for r in imported.accuracy})
    return merge_entries(entries, "performance",
                         {(r.model, r.dataset): performance_entry(r) for r in imported.performance})


def _keep_original(run: EvalRun, name: str, data: bytes | None, text: str) -> None:
    """The file as uploaded (or the pasted text) stays beside the run: its download is the original."""
    folder = local_run_dir(run.pk)
    shutil.rmtree(folder, ignore_errors=True)  # left by a run of an earlier database with the same id
    folder.mkdir(parents=True)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in (name or "pasted.txt"))[:120] or "upload"
    if data is not None:
        (folder / safe).write_bytes(data)
    else:
        (folder / "pasted.txt").write_text(text, encoding="utf-8")


def eval_import(*, user, target: ImportTarget, name: str = "", data: bytes | None = None, text: str = "") -> EvalRun:
    imported = read_import(name=name, data=data, text=text)
    tie = _tie(target)
    concurrency, max_out_len = _measured_load(imported, target)
    if len(target.note) > MAX_NOTE:
        raise BadRunSettings({"note": f"at most {MAX_NOTE} characters"})
    entries = _entries(imported)
    first = entries[0]
    dataset_key = _dataset_key(target, first["dataset"])
    tie["served_model"] = (tie["served_model"] or first["model"])[:200]
    origin = f"{name} ({imported.form})" if data is not None else f"pasted text ({imported.form})"
    with transaction.atomic():
        run = EvalRun.objects.create(
            **tie, endpoint_url="", mode=_mode(imported), dataset_key=dataset_key,
            dataset_abbr=first["dataset"][:63], dataset_family="",
            ignore_eos=target.ignore_eos, max_out_len=max_out_len, concurrency=concurrency, num_warmups=0,
            status=EvalStatus.SUCCEEDED, phase="imported", progress_done=0, progress_total=0,
            source=EvalSource.IMPORTED, imported_from=origin[:300], note=target.note, results=entries,
            **headline(entries),
            perf_requests=request_rows(imported.performance[0]) if imported.performance else [],
            created_by=user, finished=timezone.now())
        EvalSample.objects.bulk_create(sample_rows(run, imported.accuracy))
    _keep_original(run, name, data, text)
    return run
