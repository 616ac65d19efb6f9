"""Eval writes: create a run (and its job), cancel, resume, sweep, upload a dataset. Views and the API call these."""

from __future__ import annotations

import hashlib
import json
import uuid

from django.conf import settings as django_settings
from django.db import transaction
from django.utils import timezone

from apps.deployments.inventory_lookup import SIM_PROFILE, cluster_nodes
from apps.deployments.models import Deployment
from apps.jobs.choices import JobKind
from apps.jobs.services import JobStateError, job_cancel, job_create
from apps.realtime.push import emit

from .aisbench import checks
from .aisbench.config_writer import EndpointConfig
from .choices import EvalMode, EvalStatus
from .datasets import CATALOGUE, DatasetFileError, dataset_choice, uploads_root, validate_jsonl
from .models import EvalDataset, EvalRun, EvalSweep, slug_validator
from .run_settings import BadRunSettings, RunSettings, parse_concurrencies


class EvalStateError(Exception):
    """The action does not fit the run's state (cancel a finished run, resume a successful one...)."""


def _target(deployment: Deployment) -> dict:
    """Endpoint, client host and revision facts of the deployment's active revision."""
    revision = deployment.active_revision
    if revision is None:
        raise BadRunSettings({"deployment": f"{deployment.name} has no active revision to evaluate"})
    spec = revision.spec
    nodes = cluster_nodes(deployment.cluster)
    proxy = nodes.get(spec["proxy"]["node"])
    if proxy is None:
        raise BadRunSettings({"deployment": f"the proxy node {spec['proxy']['node']!r} is not in the inventory"})
    client = (spec.get("bench_client") or {}).get("node", "")
    if client and client not in nodes:
        raise BadRunSettings({"deployment": f"the AISBench client node {client!r} is not in the inventory"})
    return {"revision": revision, "revision_number": revision.number, "revision_spec": spec,
            "endpoint_url": f"http://{proxy.address}:{spec['proxy']['port']}/",
            "served_model": spec["model"]["served_name"], "simulated": revision.launch_profile == SIM_PROFILE,
            "client_node": client}


def _check_config_inputs(target: dict) -> None:
    """What the revision puts into the AISBench config file and command line passes the config writer's checks now,
    named, rather than failing the job later (a served name holding '{{' would be substituted by mmengine)."""
    try:
        EndpointConfig(base_url=target["endpoint_url"], served_model=target["served_model"])
        if target["client_node"]:  # the run dir on the client host is <run_dir>/evals/run-<id>
            checks.absolute_path("run_dir", target["revision_spec"]["run_dir"])
    except ValueError as exc:
        field = str(exc).partition(":")[0]
        where = {"served_model": "model.served_name", "run_dir": "run_dir"}.get(field, field)
        raise BadRunSettings({"deployment": f"r{target['revision_number']}'s {where} cannot go into an AISBench "
                                            f"run: {str(exc).partition(': ')[2]}"}) from None


def _check_dataset(settings: RunSettings, simulated: bool):
    choice = dataset_choice(settings.dataset)
    if choice is None:
        raise BadRunSettings({"dataset": f"unknown dataset {settings.dataset!r}"})
    if settings.mode in (EvalMode.ACCURACY, EvalMode.BOTH) and not choice.runnable:
        raise BadRunSettings({"dataset": choice.problem})
    if not choice.present:
        raise BadRunSettings({"dataset": choice.problem})
    return choice


@transaction.atomic
def eval_run_create(*, deployment: Deployment, user, settings: RunSettings | dict,
                    sweep: EvalSweep | None = None, start: bool = True) -> EvalRun:
    if not isinstance(settings, RunSettings):
        settings = RunSettings.from_dict(settings)
    target = _target(deployment)
    _check_config_inputs(target)
    choice = _check_dataset(settings, target["simulated"])
    tokenizer = settings.tokenizer_path
    if not tokenizer and target["simulated"]:
        tokenizer = django_settings.PDCP_SIM_TOKENIZER
    if settings.mode in (EvalMode.PERFORMANCE, EvalMode.BOTH) and not tokenizer:
        raise BadRunSettings({"tokenizer_path": "performance runs need the served model's tokenizer directory on the "
                                                "host that runs ais_bench (AISBench counts tokens with it)"})
    run = EvalRun.objects.create(
        deployment=deployment, deployment_name=deployment.name, **target,
        mode=settings.mode, dataset_key=choice.key, dataset_abbr=choice.name.replace("-", "_"),
        dataset_family=choice.family, api_style=settings.api_style, stream=settings.stream,
        ignore_eos=settings.ignore_eos, max_out_len=settings.max_out_len, concurrency=settings.concurrency,
        request_rate=settings.request_rate, temperature=settings.temperature, num_prompts=settings.num_prompts,
        num_warmups=settings.num_warmups,
        tokenizer_path=tokenizer, time_limit_s=settings.time_limit_s, sweep=sweep, created_by=user)
    if start:
        _start_job(run, user)
    return run


def _start_job(run: EvalRun, user, *, resume: bool = False) -> None:
    run.job = job_create(kind=JobKind.EVALUATE, target=run, user=user, params={"resume": resume},
                         label=f"eval #{run.pk} {run.dataset_abbr} on {run.deployment_name}")
    run.status = EvalStatus.PENDING
    run.save(update_fields=["job", "status"])
    eval_emit(run)


def eval_cancel(*, run: EvalRun, user) -> EvalRun:
    if run.is_finished:
        raise EvalStateError(f"eval #{run.pk} already ended ({run.get_status_display().lower()})")
    if run.job is None:  # a sweep's later run, waiting for its turn
        _cancel_waiting(EvalRun.objects.filter(pk=run.pk), user)
        run.refresh_from_db()
        return run
    try:
        job = job_cancel(run.job, user=user)
    except JobStateError as exc:
        raise EvalStateError(str(exc)) from None
    if job.is_finished:  # never claimed by a worker: nothing ran
        EvalRun.objects.filter(pk=run.pk).update(status=EvalStatus.CANCELED, finished=timezone.now(),
                                                 explanation=job.explanation)
        run.refresh_from_db()
        eval_emit(run)
        start_next_in_sweep(run)
    return run


@transaction.atomic
def eval_resume(*, run: EvalRun, user) -> EvalRun:
    """Go on from what the killed or failed run's AISBench cache holds (`--reuse`): only missing requests are sent."""
    run = EvalRun.objects.select_for_update().get(pk=run.pk)
    if not run.can_resume:
        raise EvalStateError(f"only a failed or canceled run can be resumed; eval #{run.pk} is "
                             f"{run.get_status_display().lower()}")
    run.explanation, run.log_tail, run.finished = "", [], None
    run.save(update_fields=["explanation", "log_tail", "finished"])
    _start_job(run, user, resume=True)
    return run


@transaction.atomic
def eval_sweep_create(*, deployment: Deployment, user, settings: dict, concurrencies) -> EvalSweep:
    """Performance runs over several concurrencies, one after the other (each starts when the one before ends)."""
    points = parse_concurrencies(concurrencies)
    base = RunSettings.from_dict({**settings, "mode": EvalMode.PERFORMANCE})
    sweep = EvalSweep.objects.create(deployment=deployment, deployment_name=deployment.name,
                                     concurrencies=points, created_by=user)
    for i, concurrency in enumerate(points):
        eval_run_create(deployment=deployment, user=user, sweep=sweep, start=i == 0,
                        settings=RunSettings(**{**base.as_dict(), "concurrency": concurrency}))
    return sweep


def _cancel_waiting(runs, user) -> None:
    note = f"canceled by {user.get_username() if user else 'the operator'} before it started"
    for run in runs.filter(job__isnull=True, status=EvalStatus.PENDING):
        EvalRun.objects.filter(pk=run.pk).update(status=EvalStatus.CANCELED, finished=timezone.now(),
                                                 explanation=note)
        run.refresh_from_db()
        eval_emit(run)


def start_next_in_sweep(run: EvalRun) -> EvalRun | None:
    """After a sweep's run ended: start the next one; a canceled run cancels the rest of the series."""
    if run.sweep_id is None:
        return None
    waiting = EvalRun.objects.filter(sweep_id=run.sweep_id)
    if run.status == EvalStatus.CANCELED:
        _cancel_waiting(waiting, run.created_by)
        return None
    nxt = (EvalRun.objects.filter(sweep_id=run.sweep_id, job__isnull=True, status=EvalStatus.PENDING)
           .order_by("concurrency").first())
    if nxt is not None:
        _start_job(nxt, run.created_by)
    return nxt


@transaction.atomic
def eval_dataset_upload(*, name: str, family: str, data: bytes, user, description: str = "") -> EvalDataset:
    """Validate every line first; store nothing when any line is bad (DatasetFileError names it)."""
    errors = {}
    try:
        slug_validator(name)
    except Exception:  # noqa: BLE001 - a ValidationError; its message is below
        errors["name"] = "lowercase letters, digits, '_' and '-', starting with a letter or digit"
    if len(description) > 200:
        errors["description"] = "at most 200 characters"
    if family not in ("aime", "gsm8k"):
        errors["family"] = "expected aime or gsm8k"
    if EvalDataset.objects.filter(name=name).exists() or name in {e.name for e in CATALOGUE}:
        errors["name"] = f"a dataset named {name!r} exists already"
    if errors:
        raise BadRunSettings(errors)
    try:
        count = validate_jsonl(data, family)
    except DatasetFileError as exc:
        raise BadRunSettings({"file": str(exc)}) from None
    lines = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    for item in lines:
        item["answer"] = str(item["answer"]).strip()  # AISBench compares answers as strings
    text = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in lines)
    root = uploads_root()
    root.mkdir(parents=True, exist_ok=True)
    file_name = f"{name}-{uuid.uuid4().hex[:8]}.jsonl"
    (root / file_name).write_text(text, encoding="utf-8")
    return EvalDataset.objects.create(name=name, family=family, description=description, file_name=file_name,
                                      lines=count, sha256=hashlib.sha256(text.encode()).hexdigest(), created_by=user)


def eval_payload(run: EvalRun) -> dict:
    elapsed = ((run.finished or timezone.now()) - run.started).total_seconds() if run.started else None
    remaining = None
    if elapsed and run.progress_done and run.progress_total and not run.is_finished:
        remaining = elapsed / run.progress_done * (run.progress_total - run.progress_done)
    return {"type": "eval", "id": run.pk, "status": run.status, "status_label": run.get_status_display(),
            "colour": run.colour, "phase": run.phase, "done": run.progress_done, "total": run.progress_total,
            "percent": run.percent, "elapsed_s": elapsed, "remaining_s": remaining, "accuracy": run.accuracy,
            "explanation": run.explanation, "finished": run.is_finished}


def eval_emit(run: EvalRun) -> None:
    payload = eval_payload(run)
    transaction.on_commit(lambda: emit(f"evalrun-{run.pk}", payload))


def eval_follow_job_end(job) -> None:
    """A run whose job ended without the run saying so (its worker died, a crash before the run was touched)
    ends as the job did, so it never stays "running" and its sweep goes on."""
    run = EvalRun.objects.filter(job=job).first()
    if run is None or run.is_finished:
        return
    status = EvalStatus.CANCELED if job.status == "canceled" else EvalStatus.FAILED
    EvalRun.objects.filter(pk=run.pk).update(status=status, finished=timezone.now(),
                                             explanation=job.explanation or f"its job ended {job.status}")
    run.refresh_from_db()
    eval_emit(run)
    start_next_in_sweep(run)
