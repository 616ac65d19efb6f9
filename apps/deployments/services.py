"""Deployment writes: create, save a revision (validated), activate, roll back, and start the jobs that act on it."""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Max

from apps.jobs.choices import JobKind, JobStatus
from apps.jobs.models import Job
from apps.jobs.services import job_create

from .job_params import BadJobParams, JobParams
from .models import Deployment, Process, Revision
from .revision_checks import RevisionInvalid, checked_spec
from .revision_plan import deployment_plan
from .topology import spec_to_dict, spec_to_yaml

DEPLOYMENT_JOB_KINDS = (JobKind.PREFLIGHT, JobKind.DEPLOY, JobKind.STOP, JobKind.RESTART, JobKind.ROLLING_RESTART,
                        JobKind.REFRESH)
# Jobs that start or stop processes: when their worker dies, what runs on the nodes is read back (refresh).
NODE_CHANGING_KINDS = (JobKind.DEPLOY, JobKind.STOP, JobKind.RESTART, JobKind.ROLLING_RESTART)
# Jobs that must work when the inventory no longer fits the revision (node removed, die bad).
PLANLESS_KINDS = (JobKind.STOP, JobKind.REFRESH)

logger = logging.getLogger(__name__)


class DeploymentBusy(Exception):
    """Another job already acts on this deployment."""


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


def deployment_rollback(*, revision: Revision, user, params: JobParams | dict | None = None) -> Job:
    """Rollback = activate an older revision and deploy it; if the deploy cannot start, nothing is activated."""
    with transaction.atomic():
        revision_activate(revision=revision, user=user)
        return deployment_deploy(deployment=revision.deployment, user=user, params=params)


# --- jobs ---------------------------------------------------------------------------------------------------

def _job_params(kind: JobKind, params: JobParams | dict | None, **kind_field) -> JobParams:
    """Params as given (a JobParams the API already read) or read now; instance/role join them from keywords."""
    if isinstance(params, JobParams) and not kind_field:
        return params
    raw = params.as_dict() if isinstance(params, JobParams) else dict(params or {})
    return JobParams.from_dict({**raw, **kind_field}, kind=kind)


def _start(kind: JobKind, deployment: Deployment, user, params: JobParams, *, label_extra: str = "") -> Job:
    if kind not in PLANLESS_KINDS:
        deployment_plan(deployment)  # RevisionInvalid before any job exists
    with transaction.atomic():
        Deployment.objects.select_for_update().get(pk=deployment.pk)
        busy = Job.objects.filter(target_type=Deployment._meta.label_lower, target_id=deployment.pk,
                                  status__in=[JobStatus.PENDING, JobStatus.RUNNING]).first()
        if busy:
            raise DeploymentBusy(f"job #{busy.pk} ({busy.get_kind_display().lower()}) is still "
                                 f"{busy.get_status_display().lower()} on {deployment.name}: wait for it or cancel it")
        revision = deployment.active_revision
        stored = {**params.as_dict(), "revision": revision.pk, "revision_number": revision.number}
        label = f"{deployment.name} r{revision.number}{label_extra}"
        return job_create(kind=kind, target=deployment, user=user, params=stored, label=label)


def deployment_preflight(*, deployment: Deployment, user, params: JobParams | dict | None = None) -> Job:
    return _start(JobKind.PREFLIGHT, deployment, user, _job_params(JobKind.PREFLIGHT, params))


def deployment_deploy(*, deployment: Deployment, user, params: JobParams | dict | None = None) -> Job:
    return _start(JobKind.DEPLOY, deployment, user, _job_params(JobKind.DEPLOY, params))


def deployment_stop(*, deployment: Deployment, user, params: JobParams | dict | None = None) -> Job:
    return _start(JobKind.STOP, deployment, user, _job_params(JobKind.STOP, params))


def deployment_refresh(*, deployment: Deployment, user, params: JobParams | dict | None = None) -> Job:
    """Reads the state of every recorded (and planned) process back from its node into the Process rows."""
    return _start(JobKind.REFRESH, deployment, user, _job_params(JobKind.REFRESH, params))


def refresh_after_lost_worker(job: Job) -> Job | None:
    """A deploy, stop or restart whose worker died left its nodes in a state no row may tell: read it back, as the
    swept job's owner. Nothing when another job already acts on the deployment (it reads the nodes itself)."""
    if job.kind not in NODE_CHANGING_KINDS or job.target_type != Deployment._meta.label_lower:
        return None
    deployment = Deployment.objects.filter(pk=job.target_id).first()
    if deployment is None or deployment.active_revision is None:
        return None
    try:
        refresh = deployment_refresh(deployment=deployment, user=job.created_by)
    except DeploymentBusy as exc:
        logger.info("job %s lost its worker; no read-back of %s: %s", job.pk, deployment.name, exc)
        return None
    logger.warning("job %s lost its worker: job %s reads %s back from its nodes", job.pk, refresh.pk, deployment.name)
    return refresh


def deployment_restart(*, deployment: Deployment, user, instance: str,
                       params: JobParams | dict | None = None) -> Job:
    checked = _job_params(JobKind.RESTART, params, instance=instance)
    spec, _ = deployment_plan(deployment)
    names = [i.name for i in spec.instances]
    if checked.instance not in names:
        raise BadJobParams({"instance": f"no instance {checked.instance!r} in the active revision; one of: "
                                        f"{', '.join(names)}"})
    return _start(JobKind.RESTART, deployment, user, checked, label_extra=f" {checked.instance}")


def deployment_rolling_restart(*, deployment: Deployment, user, role: str,
                               params: JobParams | dict | None = None) -> Job:
    checked = _job_params(JobKind.ROLLING_RESTART, params, role=role)
    return _start(JobKind.ROLLING_RESTART, deployment, user, checked, label_extra=f" {checked.role}")


def deployment_delete(*, deployment: Deployment) -> None:
    if deployment.processes.filter(state__in=["running", "unknown"]).exists():
        raise DeploymentBusy(f"{deployment.name} still has running (or unknown) processes: stop it first")
    deployment.delete()


__all__ = ["BadJobParams", "DeploymentBusy", "Process", "RevisionInvalid", "deployment_create",
           "deployment_deploy", "deployment_preflight", "deployment_restart", "deployment_rollback",
           "deployment_rolling_restart", "deployment_stop", "revision_activate", "revision_create"]
