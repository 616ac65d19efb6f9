"""The `procs` marker stays true: a test not marked `procs` that starts a process (subprocess, fork, spawn) or
opens a listening socket fails, naming what it started. `make test-fast` (-m "not procs") can then promise it
starts nothing, and a test that begins to start a server cannot slip into the fast lane unnoticed."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

MARK = "procs"


class StartsAProcess(AssertionError):
    pass


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise StartsAProcess(f"this test {what}: mark it @pytest.mark.{MARK} (see docs/testing.md)")
    return refuse


FAST_LANE_ENV = "PDCP_TEST_LANE"  # "fast": set by `make test-fast`; nothing in the run may start a process


def refuse_processes(patch) -> None:
    """patch(owner, name, value) for each way a test could start a process or a server."""
    patch(subprocess.Popen, "_execute_child", _refuse("starts a process (subprocess)"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            patch(os, name, _refuse(f"starts a process (os.{name})"))
    patch(socket.socket, "listen", _refuse("opens a listening socket (a server)"))


@pytest.fixture(scope="session", autouse=True)
def _fast_lane_starts_nothing():
    """In the fast lane the refusal covers the whole run, session and module fixtures included."""
    if os.environ.get(FAST_LANE_ENV) != "fast":
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        refuse_processes(patch.setattr)
        yield


@pytest.fixture(autouse=True)
def _procs_marker_is_true(request, monkeypatch):
    if request.node.get_closest_marker(MARK) is None:
        refuse_processes(monkeypatch.setattr)
    yield
