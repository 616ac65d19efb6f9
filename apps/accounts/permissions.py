"""DRF permission: reads need viewer, job-starting actions operator, every other write admin."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from .roles import Role, has_role


class RolePermission(BasePermission):
    message = "Your role does not allow this."

    def has_permission(self, request, view) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        return has_role(request.user, required_role(request, view))


def required_role(request, view) -> Role:
    action = getattr(view, "action", None)
    per_action = getattr(view, "role_for_action", {})
    if action in per_action:
        return per_action[action]
    if request.method in SAFE_METHODS:
        return Role.VIEWER
    return getattr(view, "write_role", Role.ADMIN)
