"""The user on whose behalf the current request, command or task acts (a context variable)."""

import contextlib
import contextvars

_actor: contextvars.ContextVar = contextvars.ContextVar("audit_actor", default=None)


def current_actor():
    return _actor.get()


@contextlib.contextmanager
def acting_as(user):
    token = _actor.set(user)
    try:
        yield
    finally:
        _actor.reset(token)
