"""apps/realtime/push.py's per-group budget: over it a message waits for the next token, and a newer one to the
same group replaces it, so the newest message of a burst always arrives, promptly."""

import time

import pytest

from apps.realtime import push


class RecordingLayer:
    def __init__(self):
        self.sent = []

    async def group_send(self, group, message):
        self.sent.append((group, message["payload"]))


class Clock:
    """push.py's clock, moved by the test: a loaded machine must not refill the budget mid-burst."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(push, "time", fake)
    return fake


@pytest.fixture
def layer(monkeypatch, clock):
    recording = RecordingLayer()
    monkeypatch.setattr(push, "get_channel_layer", lambda: recording)
    monkeypatch.setattr(push, "_budget", {})
    monkeypatch.setattr(push, "_held", {})
    return recording


def _wait_for(condition, timeout_s=2.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_burst_over_budget_sends_its_newest_message_once_a_token_is_back_and_drops_only_the_middle(layer, clock):
    burst = push.MAX_MESSAGES_PER_SECOND + 10
    sent_now = [push.emit("g", {"n": n}, throttle=True) for n in range(burst)]
    assert sent_now == [True] * push.MAX_MESSAGES_PER_SECOND + [False] * 10
    time.sleep(0.2)  # the held message's timer ran: still no token on push.py's clock, so it waits again
    assert len(layer.sent) == push.MAX_MESSAGES_PER_SECOND

    clock.now += 2 / push.MAX_MESSAGES_PER_SECOND  # one token back (and some: floats)
    _wait_for(lambda: len(layer.sent) > push.MAX_MESSAGES_PER_SECOND)
    time.sleep(0.1)
    assert [p["n"] for _, p in layer.sent] == [*range(push.MAX_MESSAGES_PER_SECOND), burst - 1]


def test_groups_have_budgets_of_their_own_and_unthrottled_messages_always_go(layer, clock):
    for n in range(push.MAX_MESSAGES_PER_SECOND):
        assert push.emit("a", {"n": n}, throttle=True)
    assert not push.emit("a", {"n": "held"}, throttle=True)
    assert push.emit("b", {"n": 0}, throttle=True) and push.emit("a", {"n": "status"})
    clock.now += 1
    _wait_for(lambda: layer.sent[-1][1] == {"n": "held"})
    assert [p["n"] for g, p in layer.sent if g == "a"][-2:] == ["status", "held"]


def test_a_layer_that_is_down_is_reported_not_raised(monkeypatch):
    class Down:
        async def group_send(self, group, message):
            raise ConnectionError("redis is down")

    monkeypatch.setattr(push, "get_channel_layer", lambda: Down())
    assert push.emit("g", {"n": 1}) is False
