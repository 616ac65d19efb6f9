"""Models whose changes are audited, and which of their fields are secret (recorded as changed, never shown)."""

AUDITED: dict[type, frozenset[str]] = {}


def audited(*, secret_fields: tuple[str, ...] = ()):
    def register(model):
        AUDITED[model] = frozenset(secret_fields)
        return model

    return register
