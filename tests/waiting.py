"""One way to wait in a test: on the thing itself, with a deadline whose failure says what was awaited."""

from __future__ import annotations

import time


def wait_until(predicate, timeout: float = 10.0, what: str = "condition", step: float = 0.05, *,
               tick: float | None = None):
    """predicate()'s first true value; AssertionError naming `what` once `timeout` seconds have passed."""
    step = tick if tick is not None else step
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)
    return value
