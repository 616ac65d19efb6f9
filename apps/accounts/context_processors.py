from .roles import ROLE_RANK, Role, role_of


def role(request):
    current = role_of(getattr(request, "user", None))
    rank = ROLE_RANK.get(current, 0)
    return {
        "user_role": current,
        "can_operate": rank >= ROLE_RANK[Role.OPERATOR],
        "can_admin": rank >= ROLE_RANK[Role.ADMIN],
    }
