"""Role checks for pages: a page or form action names the least role it needs."""

from functools import wraps

from django.core.exceptions import PermissionDenied

from apps.accounts.roles import Role, has_role


def role_required(role: Role):
    def decorate(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not has_role(request.user, role):
                raise PermissionDenied(f"this needs the {role.label.lower()} role")
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


viewer_required = role_required(Role.VIEWER)
operator_required = role_required(Role.OPERATOR)
admin_required = role_required(Role.ADMIN)
