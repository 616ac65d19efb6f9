"""The health state machine on plain data (apps/telemetry/health/machine.py): every state, every transition, the
auto-restart's bad-round count, its backoff, its limit and a busy deployment."""

from dataclasses import replace

from apps.telemetry.health.machine import (
    BUSY_PREFIX,
    DEGRADED,
    FAILED,
    HEALTHY,
    STARTING,
    STOPPED,
    UNHEALTHY,
    Memory,
    Policy,
    ProcessSeen,
    decide,
    held_by_busy,
    restart_wait_s,
)

T0 = 1_000_000.0
GRACE = 120.0
AUTO = Policy(auto_restart=True, unhealthy_rounds=3, backoff_s=30, max_restarts=3)


def up(key="p0-dp0", started=T0 - 600, metrics="ok"):
    return ProcessSeen(key=key, state="running", started_at=started, health=True, health_reason="HTTP 200",
                       metrics=metrics)


def down(key="p0-dp0", started=T0 - 600):
    return ProcessSeen(key=key, state="running", started_at=started, health=False,
                       health_reason="unreachable (connection refused)", metrics="unreachable",
                       metrics_reason="connection failed")


def run(prev, procs, policy=AUTO, now=T0, **kw):
    return decide(prev, procs, policy, now=now, grace_s=GRACE, **kw)


def healthy_memory(since=T0 - 300):
    return Memory(state=HEALTHY, reason="health ok", since=since)


def test_a_process_answering_health_and_metrics_is_healthy_and_the_first_round_is_an_event():
    d = run(Memory(), [up(), up("p0-dp1")])
    assert d.memory.state == HEALTHY and d.memory.since == T0
    assert [(e.from_state, e.to_state) for e in d.events] == [("", HEALTHY)]
    again = run(d.memory, [up(), up("p0-dp1")], now=T0 + 5)
    assert again.memory.state == HEALTHY and again.events == [] and again.memory.since == T0


def test_a_fresh_process_not_answering_yet_is_starting_then_healthy():
    fresh = down(started=T0 - 10)
    d = run(Memory(), [fresh])
    assert d.memory.state == STARTING and "p0-dp0" in d.memory.reason
    assert d.memory.bad_rounds == 0 and not d.restart
    d2 = run(d.memory, [up(started=T0 - 10)], now=T0 + 5)
    assert [(e.from_state, e.to_state) for e in d2.events] == [(STARTING, HEALTHY)]


def test_starting_ends_with_the_grace_period():
    d = run(Memory(state=STARTING, since=T0 - 100), [down(started=T0 - GRACE - 1)])
    assert d.memory.state == UNHEALTHY


def test_a_healthy_instance_that_stops_answering_is_unhealthy_at_once_even_if_just_started():
    d = run(healthy_memory(since=T0 - 5), [down(started=T0 - 20)])
    assert d.memory.state == UNHEALTHY and "connection refused" in d.memory.reason
    assert d.events[0].from_state == HEALTHY and d.memory.bad_rounds == 1


def test_metrics_missing_on_a_rank_with_health_ok_is_degraded_naming_it():
    d = run(healthy_memory(), [up(), up("p0-dp1", metrics="garbled")])
    assert d.memory.state == DEGRADED and "p0-dp1 garbled" in d.memory.reason and "p0-dp0" not in d.memory.reason
    assert d.memory.bad_rounds == 0


def test_one_rank_failing_its_health_check_makes_the_instance_unhealthy():
    d = run(healthy_memory(), [up(), down("p0-dp1")])
    assert d.memory.state == UNHEALTHY and d.memory.reason.startswith("p0-dp1 health")


def test_process_states_from_jobs_stopped_and_failed():
    stopped = [replace(up(), state="stopped", health=None), replace(up("p0-dp1"), state="stopped", health=None)]
    assert run(healthy_memory(), stopped).memory.state == STOPPED
    failed = [replace(up(), state="failed", health=None, detail="exited (code 1)"), up("p0-dp1")]
    d = run(healthy_memory(), failed)
    assert d.memory.state == FAILED and "exited (code 1)" in d.memory.reason


def test_no_auto_restart_without_the_policy():
    m = healthy_memory()
    for k in range(6):
        d = run(m, [down()], policy=replace(AUTO, auto_restart=False), now=T0 + 5 * k)
        assert not d.restart
        m = d.memory
    assert m.state == UNHEALTHY and m.bad_rounds == 6


def test_restart_after_unhealthy_rounds_in_a_row_then_backoff_doubles_then_the_limit():
    m, now, restarts_at = healthy_memory(), T0, []
    for _ in range(200):  # the instance never comes back: 5 s rounds, each restart job done by the next round
        d = run(m, [down()], now=now)
        if d.restart:
            restarts_at.append(now)
            m = replace(d.memory, restart_job=len(restarts_at), restart_job_status="successful")
        else:
            m = d.memory
        now += 5
        if m.state == FAILED:
            break
    assert len(restarts_at) == 3
    assert restarts_at[0] == T0 + 10  # third bad round
    gaps = [b - a for a, b in zip(restarts_at, restarts_at[1:], strict=False)]
    assert gaps == [30, 60]  # 30 s after the first, then doubled (each also needs 3 bad rounds: 15 s < 30 s)
    assert m.state == FAILED and m.reason.startswith("auto-restart gave up after 3 restarts")
    after = run(m, [down()], now=now + 3600)
    assert after.memory.state == FAILED and not after.restart and after.events == []
    assert [restart_wait_s(AUTO, k) for k in (1, 2, 3)] == [30, 60, 120]


def test_a_short_policy_counts_rounds_not_time():
    policy = replace(AUTO, unhealthy_rounds=1, backoff_s=0)
    d = run(healthy_memory(), [down()], policy=policy)
    assert d.restart and [e.restart for e in d.events] == [False, True]
    assert d.events[1].reason.startswith("auto-restart 1 of 3 after 1 bad rounds")


def test_becoming_healthy_resets_the_restarts():
    m = Memory(state=UNHEALTHY, since=T0 - 60, bad_rounds=0, restarts=2, last_restart_at=T0 - 40, restart_job=7,
               restart_job_status="successful")
    d = run(m, [up(started=T0 - 20)])
    assert d.memory.state == HEALTHY and d.memory.restarts == 0 and d.memory.bad_rounds == 0


def test_while_its_restart_job_runs_the_instance_is_starting_and_never_restarted_again():
    m = Memory(state=UNHEALTHY, since=T0 - 60, bad_rounds=5, restarts=1, last_restart_at=T0 - 600, restart_job=7,
               restart_job_status="running")
    for procs in ([down()], [replace(down(), state="stopped", health=None)], [down(started=T0 - 2)]):
        d = run(m, procs)
        assert d.memory.state == STARTING and "job #7 running" in d.memory.reason and not d.restart


def test_a_restart_job_that_failed_leaves_the_instance_failed_and_the_policy_goes_on():
    m = Memory(state=STARTING, since=T0 - 60, restarts=1, last_restart_at=T0 - 100, restart_job=7,
               restart_job_status="failed", restart_job_explanation="p0 not healthy after 30s")
    stopped = [replace(down(), state="stopped", health=None)]
    d = run(m, stopped)
    assert d.memory.state == FAILED and "not healthy after 30s" in d.memory.reason and d.memory.bad_rounds == 1
    d = run(replace(d.memory, bad_rounds=2), stopped, now=T0 + 10)
    assert d.restart  # third bad round, 110 s after the first restart > 30 s backoff


def test_a_busy_deployment_holds_the_restart_said_once_and_retried_next_round():
    prev = Memory(state=UNHEALTHY, since=T0 - 20, bad_rounds=2)
    d = run(prev, [down()])
    assert d.restart
    held = held_by_busy(d, prev, "job #9 (deploy) is still running", already_said=False)
    assert held.memory.restarts == 0 and held.memory.bad_rounds == 3 and held.memory.last_restart_at is None
    assert [e.reason for e in held.events] == [BUSY_PREFIX + "job #9 (deploy) is still running"]
    again = run(held.memory, [down()], now=T0 + 5)
    assert again.restart  # tries again the next round
    quiet = held_by_busy(again, held.memory, "job #9 (deploy) is still running", already_said=True)
    assert quiet.events == []


def test_services_are_never_restarted():
    m = healthy_memory()
    for k in range(5):
        d = run(m, [down("proxy")], now=T0 + 5 * k, restartable=False)
        assert not d.restart
        m = d.memory
    assert m.state == UNHEALTHY


def test_a_headless_secondary_counts_by_its_process_state_only():
    head = up("p0")
    headless = ProcessSeen(key="p0-n1", state="running", started_at=T0 - 600)
    assert run(healthy_memory(), [head, headless]).memory.state == HEALTHY
    assert run(healthy_memory(), [head, replace(headless, state="stopped")]).memory.state == UNHEALTHY
