"""Numbers each process keeps about itself (websocket clients of one daphne, SSH connections of one worker), made
readable by every other process for the control plane's own /metrics.

Each process writes its number into a cache key of its own (Redis, under the installation's namespace) that expires
TTL_S after its last refresh, so a crashed process's number disappears by itself instead of staying stuck; a short
index lists which processes have written. A daemon thread per process refreshes the key every REFRESH_S and at once
after a change; it starts on the first change, in each process (a forked child starts its own).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from django.core.cache import cache

logger = logging.getLogger(__name__)

REFRESH_S = 5.0
TTL_S = 20  # four refreshes: a live process's key never lapses, a dead one's is gone within TTL_S
INDEX_TTL_S = 3 * TTL_S  # kept alive by every refresh; gone soon after the last process
LOCK_WAIT_S = 1.0


def process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _value_key(name: str, process: str) -> str:
    return f"gauge:{name}:{process}"


def _index_key(name: str) -> str:
    return f"gauge:{name}:processes"


def publish(name: str, process: str, value: int) -> None:
    """Write one process's number and make sure the index lists it (pruning processes whose key expired)."""
    cache.set(_value_key(name, process), int(value), timeout=TTL_S)
    listed = cache.get(_index_key(name)) or []
    if process not in listed:
        _update_index(name, process)
    else:
        cache.touch(_index_key(name), INDEX_TTL_S)


def _update_index(name: str, process: str) -> None:
    lock, token = f"{_index_key(name)}:lock", uuid.uuid4().hex
    deadline = time.monotonic() + LOCK_WAIT_S
    while not cache.add(lock, token, timeout=5):
        if time.monotonic() > deadline:
            return  # the next refresh tries again
        time.sleep(0.02)
    try:
        listed = [p for p in cache.get(_index_key(name)) or [] if p != process]
        alive = cache.get_many([_value_key(name, p) for p in listed])
        kept = [p for p in listed if _value_key(name, p) in alive] + [process]
        cache.set(_index_key(name), sorted(kept), timeout=INDEX_TTL_S)
    finally:
        if cache.get(lock) == token:
            cache.delete(lock)


def gauge_values(name: str) -> dict[str, int]:
    """{process: number} of every process whose key has not expired."""
    listed = cache.get(_index_key(name)) or []
    values = cache.get_many([_value_key(name, p) for p in listed])
    return {p: values[_value_key(name, p)] for p in listed if _value_key(name, p) in values}


class ProcessGauge:
    """This process's number: counted with add(), or read by `read()` when something else keeps it."""

    def __init__(self, name: str, read: Callable[[], int] | None = None):
        self.name = name
        self._read = read
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._value = 0
        self._wake = threading.Event()

    def value(self) -> int:
        return self._read() if self._read is not None else self._value

    def add(self, delta: int) -> None:
        with self._lock:
            self._start_in_this_process()
            self._value += delta
        self._wake.set()

    def changed(self) -> None:
        with self._lock:
            self._start_in_this_process()
        self._wake.set()

    def publish_now(self) -> None:
        publish(self.name, process_id(), self.value())

    def _start_in_this_process(self) -> None:
        if self._pid == os.getpid():
            return
        # First change here, or in a forked child: the parent's count and thread are not this process's.
        self._pid, self._value, self._wake = os.getpid(), 0, threading.Event()
        threading.Thread(target=self._refresh_forever, args=(self._wake,), name=f"pdcp-gauge-{self.name}",
                         daemon=True).start()

    def _refresh_forever(self, wake: threading.Event) -> None:
        while True:
            try:
                self.publish_now()
            except Exception as exc:  # Redis down: the process goes on, its number just ages out
                logger.warning("process gauge %s: could not publish: %s", self.name, exc)
            wake.wait(REFRESH_S)
            wake.clear()
