"""Writes audit entries; callers never build AuditEntry rows themselves."""

from django.forms.models import model_to_dict

from .actor import current_actor
from .models import AuditAction, AuditEntry

MASK = "••••••"


def snapshot(instance) -> dict:
    """Field values as plain data; secrets stay raw here (in memory only) and are masked by `diff`."""
    data = model_to_dict(instance)
    out = {}
    for key, value in data.items():
        if isinstance(value, list):
            out[key] = [getattr(v, "pk", v) for v in value]
        else:
            out[key] = value if isinstance(value, (str, int, float, bool, type(None), dict)) else str(value)
    return out


def diff(before: dict, after: dict, secret_fields: frozenset[str] = frozenset()) -> dict:
    """{field: [before, after]} of what changed; a changed secret shows as masked on both sides."""
    changes = {}
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old != new:
            changes[key] = [MASK if old else "", MASK if new else ""] if key in secret_fields else [old, new]
    return changes


def audit_record(*, action: str, instance=None, object_type: str = "", object_id="", object_repr="",
                 changes: dict | None = None, user=None) -> AuditEntry:
    user = user if user is not None else current_actor()
    if user is not None and not getattr(user, "is_authenticated", False):
        user = None
    if instance is not None:
        object_type = object_type or instance._meta.label_lower
        object_id = object_id or str(instance.pk)
        object_repr = object_repr or str(instance)[:200]
    return AuditEntry.objects.create(
        user=user, username=user.get_username() if user else "system", action=action,
        object_type=object_type, object_id=str(object_id), object_repr=object_repr[:200], changes=changes or {},
    )


def audit_job_started(job, user) -> AuditEntry:
    return audit_record(action=AuditAction.JOB, instance=job, user=user,
                        changes={"kind": [None, job.kind], "target": [None, job.target_label]})
