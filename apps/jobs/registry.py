"""Which function runs each job kind. Apps register their handlers in AppConfig.ready, so jobs stays below them."""

from collections.abc import Callable

HANDLERS: dict[str, Callable] = {}


def job_handler(kind: str):
    def register(fn):
        HANDLERS[kind] = fn
        return fn

    return register
