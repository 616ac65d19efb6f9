"""The user on whose behalf the current request, command or task acts (a context variable)."""

import contextlib
import contextvars

_actor: contextvars.ContextVar = contextvars.ContextVar("audit_actor", default=None)


def current_actor():
    """The acting user. A request is stored, not its user: DRF authenticates tokens after middleware ran,
    and then sets the user on the underlying request, so reading it late sees the real caller."""
    actor = _actor.get()
    return getattr(actor, "user", None) if hasattr(actor, "META") else actor


@contextlib.contextmanager
def acting_as(user):
    token = _actor.set(user)
    try:
        yield
    finally:
        _actor.reset(token)
