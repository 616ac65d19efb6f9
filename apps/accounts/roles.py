"""Roles: viewer (read), operator (run jobs), admin (edit inventory, credentials, users). One place for the rules."""

from django.db import models


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    OPERATOR = "operator", "Operator"
    ADMIN = "admin", "Admin"


ROLE_RANK = {Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}
ROLE_COLOUR = {Role.VIEWER: "grey", Role.OPERATOR: "blue", Role.ADMIN: "purple"}


def role_of(user) -> Role | None:
    """The user's highest role; a user in no role group has none and sees nothing."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser:
        return Role.ADMIN
    names = getattr(user, "_role_group_names", None)
    if names is None:
        prefetched = getattr(user, "_prefetched_objects_cache", {})
        if "groups" in prefetched:
            names = {g.name for g in prefetched["groups"]}
        else:
            names = set(user.groups.values_list("name", flat=True))
        user._role_group_names = names
    best = None
    for role in Role:
        if role.value in names and (best is None or ROLE_RANK[role] > ROLE_RANK[best]):
            best = role
    return best


def has_role(user, needed: Role) -> bool:
    role = role_of(user)
    return role is not None and ROLE_RANK[role] >= ROLE_RANK[needed]


def set_role(user, role: Role) -> None:
    from django.contrib.auth.models import Group

    user.groups.remove(*Group.objects.filter(name__in=[r.value for r in Role]))
    user.groups.add(Group.objects.get_or_create(name=role.value)[0])
    user._role_group_names = {role.value}
