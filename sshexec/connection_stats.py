"""How many SSH connections this process holds open, for the control plane's own /metrics.

Every connection that connected is remembered weakly and counted while its transport is up in this process (a
forked child counts none of its parent's); listeners hear of every connect and close, so whoever publishes the
count can do it at once rather than at its next refresh.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

_lock = threading.Lock()
_connections: weakref.WeakSet = weakref.WeakSet()
_listeners: list[Callable[[], None]] = []


def on_connection_change(listener: Callable[[], None]) -> None:
    """Call `listener()` (no arguments, on the connecting thread) after each connect and close."""
    _listeners.append(listener)


def connection_changed(connection=None) -> None:
    if connection is not None:
        with _lock:
            _connections.add(connection)
    for listener in list(_listeners):
        try:
            listener()
        except Exception:  # a metrics listener must never break a command
            pass


def open_connection_count() -> int:
    with _lock:
        connections = list(_connections)
    return sum(1 for c in connections if c.is_open)
