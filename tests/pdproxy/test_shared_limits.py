"""The shared token buckets of --workers N (pdproxy/shared_limits.py): two limiters on one shared file are one
limit, per client and globally, and a full table still admits new clients."""

from __future__ import annotations

import os

import pytest

from pdproxy.shared_limits import SharedRateLimiter, create_shared_file


@pytest.fixture
def shared_fd():
    fd = create_shared_file(slots=64)
    yield fd
    os.close(fd)


def test_two_workers_draw_from_one_client_bucket(shared_fd):
    a = SharedRateLimiter(shared_fd, 0, 0, client_rate=0.001, client_burst=3, slots=64)
    b = SharedRateLimiter(shared_fd, 0, 0, client_rate=0.001, client_burst=3, slots=64)
    answers = [limiter.admit("10.0.0.7") for limiter in (a, b, a, b, a)]
    assert answers[:3] == [None, None, None]
    assert [x[0] for x in answers[3:]] == ["client", "client"]
    assert answers[3][1] > 100  # one token every 1000 s
    assert a.admit("10.0.0.8") is None  # another client has its own bucket


def test_two_workers_draw_from_one_global_bucket(shared_fd):
    a = SharedRateLimiter(shared_fd, rate=0.001, burst=4, client_rate=0, client_burst=0, slots=64)
    b = SharedRateLimiter(shared_fd, rate=0.001, burst=4, client_rate=0, client_burst=0, slots=64)
    admitted = sum(1 for i in range(10) if (a if i % 2 else b).admit(f"c{i}") is None)
    assert admitted == 4


def test_more_clients_than_slots_are_still_served(shared_fd):
    limiter = SharedRateLimiter(shared_fd, 0, 0, client_rate=0.001, client_burst=1, slots=64)
    assert all(limiter.admit(f"client-{i}") is None for i in range(500))
    # a bucket that was just used is not taken from its client while others could be: the last one still counts
    assert limiter.admit("client-499") is not None
