"""Deployment writes: create, save a revision (validated), activate, roll back, and start the jobs that act on it."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Max

from apps.jobs.choices import JobKind, JobStatus
from apps.jobs.models import Job
from apps.jobs.services import job_create

from .models import Deployment, Process, Revision
from .revision_checks import RevisionInvalid, checked_spec
from .revision_plan import deployment_plan
from .topology import spec_to_dict, spec_to_yaml

DEPLOYMENT_JOB_KINDS = (JobKind.PREFLIGHT, JobKind.DEPLOY, JobKind.STOP, JobKind.RESTART, JobKind.ROLLING_RESTART)
JOB_PARAM_DEFAULTS = {"max_parallel": 8, "health_timeout": 120, "keep_on_failure": False, "stop_grace": 10}


class DeploymentBusy(Exception):
    """Another job already acts on this deployment."""


class BadJobParams(ValueError):
    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


def deployment_create(*, name: str, cluster, user, yaml_text: str, description: str = "",
                      comment: str = "") -> Deployment:
    """A deployment and its first revision (active). RevisionInvalid if the spec does not validate."""
    spec = checked_spec(cluster=cluster, deployment_name=name, yaml_text=yaml_text)
    with transaction.atomic():
        deployment = Deployment(name=name, cluster=cluster, description=description, created_by=user)
        deployment.full_clean()
        deployment.save()
        _revision_save(deployment, spec, yaml_text, user=user, comment=comment or "created", activate=True)
    return deployment


def revision_create(*, deployment: Deployment, user, yaml_text: str | None = None, data: dict | None = None,
                    comment: str = "", activate: bool = False) -> Revision:
    """Validates (against the inventory now) and stores a new revision; the active one stays unless `activate`."""
    spec = checked_spec(cluster=deployment.cluster, deployment_id=deployment.pk, deployment_name=deployment.name,
                        yaml_text=yaml_text, data=data)
    if yaml_text is None:
        yaml_text = spec_to_yaml(spec)
    with transaction.atomic():
        Deployment.objects.select_for_update().get(pk=deployment.pk)  # serialises revision numbers
        return _revision_save(deployment, spec, yaml_text, user=user, comment=comment, activate=activate)


def _revision_save(deployment, spec, yaml_text, *, user, comment, activate) -> Revision:
    number = (deployment.revisions.aggregate(n=Max("number"))["n"] or 0) + 1
    revision = Revision.objects.create(
        deployment=deployment, number=number, spec=spec_to_dict(spec), yaml_text=yaml_text, comment=comment[:200],
        launch_profile=spec.launch_profile, served_model=spec.model.served_name, created_by=user)
    if activate:
        revision_activate(revision=revision, user=user)
    return revision


def revision_activate(*, revision: Revision, user) -> Revision:
    """Makes this the one active revision (validated again: the inventory may have changed)."""
    checked_spec(cluster=revision.deployment.cluster, deployment_id=revision.deployment_id, data=revision.spec)
    with transaction.atomic():
        for old in Revision.objects.select_for_update().filter(deployment_id=revision.deployment_id, is_active=True):
            if old.pk != revision.pk:
                old.is_active = False
                old.save(update_fields=["is_active"])  # before the new one: the partial unique index
        if not revision.is_active:
            revision.is_active = True
            revision.save(update_fields=["is_active"])
    return revision


def deployment_rollback(*, revision: Revision, user, params: dict | None = None) -> Job:
    """Rollback = activate an older revision and deploy it; if the deploy cannot start, nothing is activated."""
    with transaction.atomic():
        revision_activate(revision=revision, user=user)
        return deployment_deploy(deployment=revision.deployment, user=user, params=params)


# --- jobs ---------------------------------------------------------------------------------------------------

def clean_job_params(params: dict | None, *, extra: dict | None = None) -> dict:
    params = dict(params or {})
    out = dict(JOB_PARAM_DEFAULTS)
    errors = {}
    for key in ("max_parallel", "health_timeout", "stop_grace"):
        if key in params:
            value = params.pop(key)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 3600:
                errors[key] = "expected a whole number from 1 to 3600"
            else:
                out[key] = value
    if params.pop("sequential", False) is True:
        out["max_parallel"] = 1
    if "keep_on_failure" in params:
        value = params.pop("keep_on_failure")
        if not isinstance(value, bool):
            errors["keep_on_failure"] = "expected true or false"
        else:
            out["keep_on_failure"] = value
    for key, value in (extra or {}).items():
        out[key] = value
    for key in params:
        errors[key] = "unknown parameter; known: max_parallel, sequential, health_timeout, stop_grace, keep_on_failure"
    if errors:
        raise BadJobParams(errors)
    return out


def _start(kind: JobKind, deployment: Deployment, user, params: dict, *, label_extra: str = "") -> Job:
    if kind != JobKind.STOP:  # stopping must work when the inventory no longer fits (node removed, die bad)
        deployment_plan(deployment)  # RevisionInvalid before any job exists
    with transaction.atomic():
        Deployment.objects.select_for_update().get(pk=deployment.pk)
        busy = Job.objects.filter(target_type=Deployment._meta.label_lower, target_id=deployment.pk,
                                  status__in=[JobStatus.PENDING, JobStatus.RUNNING]).first()
        if busy:
            raise DeploymentBusy(f"job #{busy.pk} ({busy.get_kind_display().lower()}) is still "
                                 f"{busy.get_status_display().lower()} on {deployment.name}: wait for it or cancel it")
        revision = deployment.active_revision
        params = {**params, "revision": revision.pk, "revision_number": revision.number}
        label = f"{deployment.name} r{revision.number}{label_extra}"
        return job_create(kind=kind, target=deployment, user=user, params=params, label=label)


def deployment_preflight(*, deployment: Deployment, user, params: dict | None = None) -> Job:
    return _start(JobKind.PREFLIGHT, deployment, user, clean_job_params(params))


def deployment_deploy(*, deployment: Deployment, user, params: dict | None = None) -> Job:
    return _start(JobKind.DEPLOY, deployment, user, clean_job_params(params))


def deployment_stop(*, deployment: Deployment, user, params: dict | None = None) -> Job:
    return _start(JobKind.STOP, deployment, user, clean_job_params(params))


def deployment_restart(*, deployment: Deployment, user, instance: str, params: dict | None = None) -> Job:
    spec, _ = deployment_plan(deployment)
    names = [i.name for i in spec.instances]
    if instance not in names:
        raise BadJobParams({"instance": f"no instance {instance!r} in the active revision; one of: {', '.join(names)}"})
    return _start(JobKind.RESTART, deployment, user, clean_job_params(params, extra={"instance": instance}),
                  label_extra=f" {instance}")


def deployment_rolling_restart(*, deployment: Deployment, user, role: str, params: dict | None = None) -> Job:
    if role not in ("prefill", "decode"):
        raise BadJobParams({"role": "expected prefill or decode"})
    return _start(JobKind.ROLLING_RESTART, deployment, user, clean_job_params(params, extra={"role": role}),
                  label_extra=f" {role}")


def deployment_delete(*, deployment: Deployment) -> None:
    if deployment.processes.filter(state__in=["running", "unknown"]).exists():
        raise DeploymentBusy(f"{deployment.name} still has running (or unknown) processes: stop it first")
    deployment.delete()


__all__ = ["BadJobParams", "DeploymentBusy", "Process", "RevisionInvalid", "deployment_create",
           "deployment_deploy", "deployment_preflight", "deployment_restart", "deployment_rollback",
           "deployment_rolling_restart", "deployment_stop", "revision_activate", "revision_create"]
