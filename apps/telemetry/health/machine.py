"""The health state machine on plain data: what one round observed of a subject (an instance or a service
process) plus what was remembered of it gives its new state, the events to record and whether to restart it.
No Django, no clock, no I/O: docs/health-policy.md states the rules these functions implement."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

STARTING, HEALTHY, DEGRADED, UNHEALTHY, STOPPED, FAILED = (
    "starting", "healthy", "degraded", "unhealthy", "stopped", "failed")
BAD = (UNHEALTHY, FAILED)
BUSY_PREFIX = "auto-restart waits: "


@dataclass(frozen=True)
class ProcessSeen:
    """One process of a subject in one round. health: True 200/accepting, False failing, None not probed (no
    health URL: a headless DP secondary). metrics: the scrape status (ok, unreachable, garbled), None if no target."""

    key: str
    state: str                        # Process.state: running | stopped | failed | unknown
    started_at: float | None = None   # epoch seconds
    health: bool | None = None
    health_reason: str = ""
    metrics: str | None = None
    metrics_reason: str = ""
    detail: str = ""                  # Process.state_detail


@dataclass(frozen=True)
class Memory:
    """What was kept of a subject (models.InstanceHealth)."""

    state: str = ""
    reason: str = ""
    since: float | None = None
    bad_rounds: int = 0
    restarts: int = 0
    last_restart_at: float | None = None
    restart_job: int | None = None
    restart_job_status: str | None = None    # pending | running | successful | failed | error | canceled
    restart_job_explanation: str = ""


@dataclass(frozen=True)
class Policy:
    auto_restart: bool = False
    unhealthy_rounds: int = 3
    backoff_s: float = 30
    max_restarts: int = 3


@dataclass(frozen=True)
class Event:
    from_state: str
    to_state: str
    reason: str
    restart: bool = False   # this event starts a restart: the job joins it once it exists


@dataclass
class Decision:
    memory: Memory
    events: list[Event] = field(default_factory=list)
    restart: bool = False
    restart_reason: str = ""
    next_restart_at: float | None = None


def job_active(m: Memory) -> bool:
    return m.restart_job is not None and m.restart_job_status in ("pending", "running")


def restart_wait_s(policy: Policy, restarts: int) -> float:
    """The wait after the `restarts`-th auto-restart before the next one may start: backoff_s, then doubling."""
    return policy.backoff_s * 2 ** max(0, restarts - 1)


def observe(processes: list[ProcessSeen], *, prev: Memory, now: float, grace_s: float) -> tuple[str, str]:
    """The state this round's readings alone show, and why (naming the processes)."""
    if not processes:
        return STOPPED, "no process recorded"
    failed = [p for p in processes if p.state == "failed"]
    if failed:
        return FAILED, "; ".join(f"{p.key} failed" + (f": {p.detail}" if p.detail else "") for p in failed)
    stopped = [p for p in processes if p.state == "stopped"]
    if len(stopped) == len(processes):
        return STOPPED, "every process stopped"
    probed = [p for p in processes if p.health is not None and p.state != "stopped"]
    failing = [p for p in probed if not p.health]
    started = [p.started_at for p in processes if p.started_at is not None]
    fresh = bool(started) and now - max(started) < grace_s
    never_healthy_since = prev.state in ("", STARTING, STOPPED) or (
        prev.since is not None and bool(started) and max(started) > prev.since)
    if (failing or stopped) and fresh and never_healthy_since:
        return STARTING, "started, not healthy yet: " + ", ".join(p.key for p in failing + stopped)
    if stopped:
        return UNHEALTHY, ", ".join(f"{p.key} stopped" for p in stopped) + " while the others run"
    if failing:
        return UNHEALTHY, "; ".join(f"{p.key} health {p.health_reason or 'failing'}" for p in failing)
    missing = [p for p in processes if p.metrics is not None and p.metrics != "ok"]
    if missing:
        return DEGRADED, "health ok; metrics not read: " + "; ".join(
            f"{p.key} {p.metrics}" + (f" ({p.metrics_reason})" if p.metrics_reason else "") for p in missing)
    unknown = [p for p in processes if p.state == "unknown"]
    if unknown:
        return DEGRADED, "health ok; process state unknown: " + ", ".join(p.key for p in unknown)
    return HEALTHY, "health ok" + (", metrics ok" if any(p.metrics for p in processes) else "")


def decide(prev: Memory, processes: list[ProcessSeen], policy: Policy, *, now: float, grace_s: float,
           restartable: bool = True) -> Decision:
    """The subject's next memory, its events and whether an auto-restart should start now. `restartable`: an
    engine instance (deployment_restart restarts instances, not service processes)."""
    seen, reason = observe(processes, prev=prev, now=now, grace_s=grace_s)
    restarting = job_active(prev)
    if restarting and seen in (STOPPED, UNHEALTHY, STARTING):
        seen, reason = STARTING, f"auto-restart job #{prev.restart_job} {prev.restart_job_status}"
    elif seen in (STOPPED, UNHEALTHY) and prev.restarts and prev.restart_job_status in ("failed", "error", "canceled"):
        seen = FAILED  # the restart job's rollback stopped what it started: still the instance that broke
        reason = (f"auto-restart job #{prev.restart_job} {prev.restart_job_status}"
                  + (f": {prev.restart_job_explanation}" if prev.restart_job_explanation else ""))
    m = replace(prev, reason=reason, bad_rounds=prev.bad_rounds + 1 if seen in BAD else 0)
    if seen in (HEALTHY, STOPPED):
        m = replace(m, restarts=0)
    decision = Decision(memory=m)
    target = seen
    if seen in BAD and policy.auto_restart and restartable and not restarting:
        target = _auto_restart(decision, policy, seen=seen, now=now)
    _move(decision, prev.state, target, now=now)
    if decision.restart:
        decision.events.append(Event(target, target, decision.restart_reason, restart=True))
    return decision


def _auto_restart(decision: Decision, policy: Policy, *, seen: str, now: float) -> str:
    """Within decide(): give up at the limit, else restart once the bad rounds add up and the backoff passed.
    Returns the state the subject ends the round in."""
    m = decision.memory
    if m.restarts >= policy.max_restarts:
        decision.memory = replace(m, reason=f"auto-restart gave up after {m.restarts} restart"
                                             f"{'' if m.restarts == 1 else 's'} without a healthy round: {m.reason}")
        return FAILED
    if m.bad_rounds < policy.unhealthy_rounds:
        return seen
    if m.restarts and m.last_restart_at is not None:
        due = m.last_restart_at + restart_wait_s(policy, m.restarts)
        if now < due:
            decision.next_restart_at = due
            return seen
    decision.restart = True
    decision.restart_reason = (f"auto-restart {m.restarts + 1} of {policy.max_restarts} after {m.bad_rounds} "
                               f"bad rounds: {m.reason}")
    decision.memory = replace(m, restarts=m.restarts + 1, last_restart_at=now, bad_rounds=0)
    return seen


def _move(decision: Decision, old: str, new: str, *, now: float) -> None:
    if new != old:
        decision.events.insert(0, Event(old, new, decision.memory.reason))
        decision.memory = replace(decision.memory, state=new, since=now)


def held_by_busy(decision: Decision, prev: Memory, why: str, *, already_said: bool) -> Decision:
    """The restart decide() asked for could not start (another job acts on the deployment): nothing counted, the
    bad rounds kept so the next round tries again; said once as an event, not every round."""
    memory = replace(decision.memory, restarts=prev.restarts, last_restart_at=prev.last_restart_at,
                     bad_rounds=max(decision.memory.bad_rounds, prev.bad_rounds + 1))
    events = [e for e in decision.events if not e.restart]
    if not already_said:
        events.append(Event(memory.state, memory.state, BUSY_PREFIX + why))
    return Decision(memory=memory, events=events)
