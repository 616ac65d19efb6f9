"""Audits every save and delete of registered models, whichever door (UI, API, admin, import) they came through,
and every change to a user account (announced by apps/accounts/services.py)."""

from django.db.models.signals import post_delete, post_init, post_save
from django.dispatch import receiver

from apps.accounts.services import user_account_changed

from .models import AuditAction
from .registry import AUDITED
from .services import audit_record, diff, snapshot


@receiver(post_init)
def remember_state(sender, instance, **kwargs):
    if sender in AUDITED and instance.pk is not None:
        instance._audit_before = snapshot(instance)


@receiver(post_save)
def record_save(sender, instance, created, raw=False, **kwargs):
    if raw or sender not in AUDITED:
        return
    secret_fields = AUDITED[sender]
    after = snapshot(instance)
    if created:
        audit_record(action=AuditAction.CREATE, instance=instance, changes=diff({}, after, secret_fields))
    else:
        changes = diff(getattr(instance, "_audit_before", {}), after, secret_fields)
        if changes:
            audit_record(action=AuditAction.UPDATE, instance=instance, changes=changes)
    instance._audit_before = after


@receiver(post_delete)
def record_delete(sender, instance, **kwargs):
    if sender in AUDITED:
        audit_record(action=AuditAction.DELETE, instance=instance,
                     changes=diff(snapshot(instance), {}, AUDITED[sender]))


@receiver(user_account_changed)
def record_user_change(sender, actor, user, action, object_id, object_repr, before, after, secret_fields, **kwargs):
    """User accounts (apps/accounts/services.py): which fields changed, the role before and after, and a changed
    password only as masked."""
    audit_record(action=AuditAction(action), user=actor, object_type=sender._meta.label_lower, object_id=object_id,
                 object_repr=object_repr, changes=diff(before, after, secret_fields))
