"""The Prefill and Decode instances: their state (healthy, pending, ejected, draining), load and idle connections."""

from __future__ import annotations

import logging
import time

from .config import parse_address
from .http_client import BackendError, ClientConnection

log = logging.getLogger("pdproxy.backends")

HEALTHY, PENDING, EJECTED, DRAINING = "healthy", "pending", "ejected", "draining"
MAX_IDLE = 256


class Backend:
    __slots__ = ("role", "host", "port", "addr", "weight", "state", "inflight", "inflight_load", "idle",
                 "fail_5xx", "last_error", "state_since", "requests", "failures", "host_header",
                 "removed", "unanswered_probes")

    def __init__(self, role: str, addr: str, weight: float = 1.0, state: str = PENDING):
        self.role = role
        self.host, self.port = parse_address(addr)
        self.addr = f"{self.host}:{self.port}"
        self.host_header = self.addr.encode()
        self.weight = float(weight) if weight and weight > 0 else 1.0
        self.state = state
        self.state_since = time.monotonic()
        self.inflight = 0
        self.inflight_load = 0.0
        self.idle: list[ClientConnection] = []
        self.fail_5xx = 0
        self.last_error = ""
        self.requests = 0
        self.failures = 0
        self.removed = False
        self.unanswered_probes = 0  # health checks in a row that got no answer within --health-timeout

    @property
    def available(self) -> bool:
        return self.state == HEALTHY

    def describe(self) -> dict:
        return {"address": self.addr, "role": self.role, "state": self.state, "weight": self.weight,
                "inflight": self.inflight, "requests": self.requests, "failures": self.failures,
                "last_error": self.last_error,
                "state_for_seconds": round(time.monotonic() - self.state_since, 3)}

    # connections (BackendLease / ConnectionLease hold them for one exchange)
    def take_idle(self) -> ClientConnection | None:
        """An idle keep-alive connection, or None (then the caller opens a new one)."""
        idle = self.idle
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        return None

    def return_connection(self, conn: ClientConnection):
        """Back to the idle pool when its answer was read whole and it may be reused, else closed."""
        if conn.complete and conn.reusable and not conn.closed and not self.removed and len(self.idle) < MAX_IDLE:
            conn.disarm()
            self.idle.append(conn)
        else:
            conn.close()

    def close_idle(self):
        idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()


class BackendPool:
    """All instances of one role. `version` changes whenever membership or availability changes."""

    def __init__(self, role: str, eject_after_5xx: int = 3, health_timeouts_to_eject: int = 3):
        self.role = role
        self.eject_after_5xx = eject_after_5xx  # consecutive 5xx answers that eject an instance (--eject-after-5xx)
        self.health_timeouts_to_eject = health_timeouts_to_eject  # --health-timeouts-to-eject
        self.backends: list[Backend] = []
        self.version = 0
        self._available: list[Backend] = []
        self.on_change = None  # the supervisor of --workers N (supervisor.py): told every change, to copy it out
        self.reporter = None  # a worker's link to the supervisor (worker_link.py): told every passive verdict

    def _changed(self):
        self.version += 1
        self._available = [b for b in self.backends if b.state == HEALTHY]
        if self.on_change is not None:
            self.on_change(self)

    def available(self) -> list[Backend]:
        return self._available

    def get(self, addr: str) -> Backend | None:
        host, port = parse_address(addr)
        key = f"{host}:{port}"
        for b in self.backends:
            if b.addr == key:
                return b
        return None

    def add(self, addr: str, weight: float = 1.0, state: str = PENDING) -> Backend:
        existing = self.get(addr)
        if existing is not None:
            raise ValueError(f"{self.role} instance {existing.addr} already exists")
        b = Backend(self.role, addr, weight, state)
        self.backends.append(b)
        self._changed()
        return b

    def remove(self, addr: str) -> Backend:
        b = self.get(addr)
        if b is None:
            raise KeyError(addr)
        self.backends.remove(b)
        b.removed = True
        b.close_idle()
        self._changed()
        return b

    def set_state(self, b: Backend, state: str, reason: str = ""):
        if b.state == state:
            return
        log.log(logging.WARNING if state == EJECTED else logging.INFO, "%s %s: %s -> %s%s", self.role, b.addr,
                b.state, state, f" ({reason})" if reason else "")
        b.state = state
        b.state_since = time.monotonic()
        if state == EJECTED:
            b.close_idle()
        if not b.removed:
            self._changed()

    # passive health
    def report_failure(self, b: Backend, err: BackendError | None = None, status: int = 0):
        """A request's failure on `b`. A connection failure, a timeout or a broken stream ejects it at once, the
        --eject-after-5xx-th consecutive 5xx answer does; but no passive failure ejects a role's last healthy
        instance: the active health check does that (README, "Ejection"). In PD a Decode's failure is often a
        dead Prefill's fault, and an empty role turns a partial outage into 503s until the next probe."""
        b.failures += 1
        if self.reporter is not None:
            self.reporter.failure(self.role, b.addr, err.reason if err is not None else None, status)
        if err is not None:
            b.last_error = err.reason
            reason = err.reason
        else:
            b.fail_5xx += 1
            b.last_error = f"answered HTTP {status}"
            if b.fail_5xx < self.eject_after_5xx:
                return
            reason = f"{b.fail_5xx} consecutive 5xx answers"
        if b.state == PENDING or (b.state == HEALTHY and len(self._available) > 1):
            self.set_state(b, EJECTED, reason)

    def report_success(self, b: Backend):
        if b.fail_5xx:
            b.fail_5xx = 0
            if self.reporter is not None:
                self.reporter.success(self.role, b.addr)

    # active health
    def report_probe(self, b: Backend, failure: str | None, unanswered: bool = False):
        """A health check's verdict (None: it passed). Passing brings a pending or ejected instance in;
        failing ejects a healthy one: a refused connection or an error answer at once, a check left unanswered
        (a busy engine's API server may be late) only the --health-timeouts-to-eject-th time in a row. A
        draining instance stays draining, a pending one pending."""
        if failure is None:
            b.unanswered_probes = 0
            if b.state in (PENDING, EJECTED):
                b.fail_5xx = 0
                self.set_state(b, HEALTHY, "health check passed")
            return
        b.unanswered_probes = b.unanswered_probes + 1 if unanswered else 0
        b.last_error = f"{failure} ({b.unanswered_probes} checks in a row)" if unanswered else failure
        if b.state == HEALTHY and (not unanswered or b.unanswered_probes >= self.health_timeouts_to_eject):
            self.set_state(b, EJECTED, b.last_error)

    # one truth across worker processes (supervisor.py): the supervisor's pools are copied into every worker's
    def state_entries(self) -> list[list]:
        return [[b.addr, b.weight, b.state, b.fail_5xx, b.last_error] for b in self.backends]

    def mirror(self, entries: list[list]) -> None:
        """Become what the supervisor's pool of this role is: members, order, weights, states, 5xx streaks."""
        known = {b.addr: b for b in self.backends}
        members = []
        for addr, weight, state, fail_5xx, last_error in entries:
            b = known.pop(addr, None) or Backend(self.role, addr, weight, state)
            if b.state != state:
                b.state = state
                b.state_since = time.monotonic()
                if state == EJECTED:
                    b.close_idle()
            b.weight, b.fail_5xx, b.last_error = weight, fail_5xx, last_error
            members.append(b)
        for gone in known.values():
            gone.removed = True
            gone.close_idle()
        self.backends = members
        self._changed()

    def why_unavailable(self) -> str:
        if not self.backends:
            return f"no {self.role} instance is configured"
        states = ", ".join(
            f"{b.addr} {b.state}" + (f" ({b.last_error})" if b.last_error and b.state != DRAINING else "")
            for b in self.backends)
        return f"no healthy {self.role} instance: {states}"
