"""The ports tests give their servers lie outside the kernel's ephemeral range (an outgoing connection can never take
one between the pick and the server's bind), differ between xdist workers, and are never handed out twice."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from tests import ports

TESTS = Path(__file__).resolve().parent


def test_a_port_is_below_the_ephemeral_range_and_in_this_workers_stripe():
    low, _ = ports._ephemeral_range()
    given = [ports.free_port() for _ in range(20)]
    assert all(p < low and p in ports._stripe for p in given), given
    assert len(set(given)) == len(given)


def test_the_workers_stripes_do_not_overlap():
    stripes = [set(ports.worker_stripe(f"gw{i}", 3)) for i in range(3)]
    assert not stripes[0] & stripes[1] and not stripes[1] & stripes[2] and not stripes[0] & stripes[2]
    assert set(ports.worker_stripe(None, 1)) == set(range(ports.LOW, ports.HIGH))


def test_a_port_something_holds_is_skipped():
    taken = socket.socket()
    try:
        nxt = ports._stripe[(next(ports._next) + 1) % len(ports._stripe)]
        taken.bind(("127.0.0.1", nxt))
        assert ports.free_port() != nxt
    finally:
        taken.close()


def test_no_test_picks_a_port_by_binding_port_0_and_letting_it_go():
    """A helper that binds port 0, reads the port and closes the socket hands a server an ephemeral port."""
    pickers = []
    for path in TESTS.rglob("*.py"):
        text = path.read_text()
        if path.name != "ports.py" and re.search(r"def \w*(free|closed)_port\b", text):
            pickers.append(str(path.relative_to(TESTS)))
    assert pickers == [], f"use tests.ports.free_port in {pickers}"


def test_a_run_of_ports_is_consecutive_free_and_never_handed_out_again():
    first = ports.free_port_run(3)
    run = {first, first + 1, first + 2}
    assert run <= set(ports._stripe) and all(ports.binds("127.0.0.1", p) for p in run)
    later = [ports.free_port() for _ in range(20)] + [ports.free_port_run(2) for _ in range(5)]
    assert not run & set(later), (run, later)


def test_a_run_skips_a_start_whose_next_port_something_holds():
    taken = socket.socket()
    try:
        start = ports._stripe[(next(ports._next) + 1) % len(ports._stripe)]
        taken.bind(("127.0.0.1", start + 1))
        first = ports.free_port_run(2)
        assert start + 1 not in (first, first + 1)
    finally:
        taken.close()
