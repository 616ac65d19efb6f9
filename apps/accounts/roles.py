"""Roles: viewer (read), operator (run jobs), admin (edit inventory, credentials, users). One place for the rules."""

from apps.coloured_choices import ColouredChoices


class Role(ColouredChoices):
    VIEWER = "viewer", "Viewer", "grey"
    OPERATOR = "operator", "Operator", "blue"
    ADMIN = "admin", "Admin", "purple"


ROLE_RANK = {Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}


def role_of(user) -> Role | None:
    """The role the user acts with: the highest it holds, or none for an anonymous or deactivated user (who may do
    nothing) and for a user in no role group (who sees nothing). Every permission check goes through this."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    return stored_role(user)


def stored_role(user) -> Role | None:
    """The highest role the user holds, active or not: what a listing of users shows. Not for permission checks
    (use role_of or has_role, which deny a deactivated user)."""
    if user is None or not user.is_authenticated:
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
    return role_from(names, is_superuser=False)


def role_from(group_names, *, is_superuser: bool) -> Role | None:
    """The highest role among these group names (a superuser is an admin whatever its groups)."""
    if is_superuser:
        return Role.ADMIN
    best = None
    for role in Role:
        if role.value in group_names and (best is None or ROLE_RANK[role] > ROLE_RANK[best]):
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
