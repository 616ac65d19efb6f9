"""User writes (create, change, delete) and the rule that keeps someone able to manage users. The REST API and the
Django admin both come through here.

The rule: nobody deactivates, demotes or deletes themself, and the last active admin is never deactivated, demoted
or deleted. Refusals are django.core.exceptions.ValidationError naming the field (`is_active`, `role`); a refused
delete carries a plain message.

Every change is announced with the `user_account_changed` signal (apps/audit records it: accounts sits below audit
in the layers, so it cannot call it). The state it carries holds the password hash only so that the audit can say
"the password changed" (masked); the hash itself is never written anywhere.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.dispatch import Signal

from .roles import ROLE_RANK, Role, set_role, stored_role

# Sent inside the write's transaction, after it: actor (who did it, or None), user, action ("create", "update",
# "delete"), object_id, object_repr, before and after (user_state dicts; {} for a side that does not exist) and
# secret_fields (keys whose values must never be shown).
user_account_changed = Signal()

SECRET_FIELDS = frozenset({"password"})
UNCHANGED = object()

SELF_DEACTIVATE = "You cannot deactivate your own account: another admin has to do it."
SELF_DEMOTE = "You cannot lower your own role: another admin has to do it."
SELF_DELETE = "You cannot delete your own account: another admin has to do it."
LAST_ADMIN_DEACTIVATE = ("{name} is the last active admin: make another user an admin before deactivating this one, "
                         "or nobody could manage users any more.")
LAST_ADMIN_DEMOTE = ("{name} is the last active admin: make another user an admin before lowering this one's role, "
                     "or nobody could manage users any more.")
LAST_ADMIN_DELETE = ("{name} is the last active admin: make another user an admin before deleting this one, "
                     "or nobody could manage users any more.")
LAST_ADMINS_DELETE = ("These are the last active admins ({names}): make another user an admin before deleting them, "
                      "or nobody could manage users any more.")


def _rank(role: Role | None) -> int:
    return ROLE_RANK[role] if role is not None else 0


def _active_admins():
    User = get_user_model()
    return User.objects.filter(Q(is_superuser=True) | Q(groups__name=Role.ADMIN.value), is_active=True).distinct()


def _lock_admin_changes() -> None:
    """Serialises changes that could remove an admin (two admins demoting each other at once must not both pass):
    a row lock on the admin role group, held to the end of the caller's transaction."""
    if transaction.get_connection().in_atomic_block:
        list(Group.objects.select_for_update().filter(name=Role.ADMIN.value).values_list("pk", flat=True))


def check_admin_change(actor, user, *, is_active=None, role=UNCHANGED) -> None:
    """Refuse (ValidationError naming the field) a change that would lock people out: `actor` deactivating or
    lowering the role of themself, or anyone deactivating or demoting the last active admin. `is_active` and `role`
    are the values after the change (None and UNCHANGED: as they are); `role` is the role the user would hold."""
    if user.pk is None:
        return
    active_after = user.is_active if is_active is None else bool(is_active)
    role_before = stored_role(user)
    role_after = role_before if role is UNCHANGED else role
    errors = {}
    if actor is not None and actor.pk == user.pk:
        if user.is_active and not active_after:
            errors["is_active"] = SELF_DEACTIVATE
        if _rank(role_after) < _rank(role_before):
            errors["role"] = SELF_DEMOTE
    if not errors and user.is_active and role_before == Role.ADMIN and not (active_after and role_after == Role.ADMIN):
        _lock_admin_changes()
        if not _active_admins().exclude(pk=user.pk).exists():
            name = user.get_username()
            if not active_after:
                errors["is_active"] = LAST_ADMIN_DEACTIVATE.format(name=name)
            if role_after != Role.ADMIN:
                errors["role"] = LAST_ADMIN_DEMOTE.format(name=name)
    if errors:
        raise ValidationError(errors)


def check_users_delete(actor, users) -> None:
    """Refuse (ValidationError with a message) deleting yourself, or the last active admins."""
    users = list(users)
    if actor is not None and any(u.pk == actor.pk for u in users):
        raise ValidationError(SELF_DELETE)
    admins = [u for u in users if u.is_active and stored_role(u) == Role.ADMIN]
    if not admins:
        return
    _lock_admin_changes()
    if not _active_admins().exclude(pk__in=[u.pk for u in users]).exists():
        names = [u.get_username() for u in admins]
        if len(names) == 1:
            raise ValidationError(LAST_ADMIN_DELETE.format(name=names[0]))
        raise ValidationError(LAST_ADMINS_DELETE.format(names=", ".join(names)))


def user_state(user) -> dict:
    """What the audit compares: the account's fields and role, and the password (its hash, "" when unusable)."""
    user.__dict__.pop("_role_group_names", None)  # read the groups afresh: a form may have just saved them
    getattr(user, "_prefetched_objects_cache", {}).pop("groups", None)
    role = stored_role(user)
    return {
        "username": user.get_username(), "email": user.email, "first_name": user.first_name,
        "last_name": user.last_name, "is_active": user.is_active, "is_staff": user.is_staff,
        "is_superuser": user.is_superuser, "role": role.value if role else None,
        "password": user.password if user.has_usable_password() else "",
    }


def user_state_stored(user) -> dict:
    """user_state of the row as it is in the database (the form or serializer may have changed the instance)."""
    return user_state(get_user_model().objects.get(pk=user.pk))


def user_change_record(actor, user, *, action: str, before: dict, after: dict | None = None,
                       object_id=None) -> None:
    """Announce a change (the audit writes an entry); nothing when nothing changed."""
    after = user_state(user) if after is None else after
    if action == "update" and before == after:
        return
    if action != "update":  # a new or deleted account: its blank fields say nothing
        before, after = _shown(before), _shown(after)
    user_account_changed.send(sender=get_user_model(), actor=actor, user=user, action=action,
                              object_id=str(object_id if object_id is not None else user.pk),
                              object_repr=(after or before).get("username", ""), before=before, after=after,
                              secret_fields=SECRET_FIELDS)


def _shown(state: dict) -> dict:
    return {k: v for k, v in state.items() if v not in ("", None, False) or k == "is_active"}


@transaction.atomic
def user_create(actor, *, role: Role | str, password: str | None = None, **fields):
    User = get_user_model()
    user = User(**fields)
    if password:
        user.set_password(password)
    else:
        user.set_unusable_password()
    user.save()
    set_role(user, Role(role))
    user_change_record(actor, user, action="create", before={})
    return user


@transaction.atomic
def user_update(actor, user, *, role: Role | str | None = None, password: str | None = None, **fields):
    """Change these fields (and the role, and the password, when given), after check_admin_change. A role other
    than admin also takes away superuser status, which would otherwise keep the user an admin."""
    role = Role(role) if role else None
    stored = get_user_model().objects.get(pk=user.pk)  # the instance may hold the caller's unsaved changes
    before = user_state(stored)
    check_admin_change(actor, stored, is_active=fields.get("is_active"),
                       role=UNCHANGED if role is None else role)
    for key, value in fields.items():
        setattr(user, key, value)
    if password:
        user.set_password(password)
    if role is not None and role != Role.ADMIN:
        user.is_superuser = False
    user.save()
    if role is not None:
        set_role(user, role)
    user_change_record(actor, user, action="update", before=before)
    return user


@transaction.atomic
def user_delete(actor, user) -> None:
    check_users_delete(actor, [user])
    before, pk = user_state(user), user.pk
    user.delete()
    user_change_record(actor, user, action="delete", before=before, after={}, object_id=pk)
