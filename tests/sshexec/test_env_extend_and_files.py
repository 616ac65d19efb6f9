"""EnvExtend values keep the node's own value and stay literal; launch files are checked before a start and removed
by remove_files_command without following symbolic links. Real sshd nodes (tests/sshexec/conftest.py), login user
`simnode` with /bin/sh; run dirs below simnode's private home (simcluster/rundirs.py)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from simcluster.rundirs import new_run_dir
from sshexec import (
    EnvExtend,
    LaunchFile,
    LaunchSpec,
    SshConnection,
    SshTargetInvalid,
    detached_start_command,
    remove_files_command,
    stop_command,
)

HOSTILE = "$(touch PWNED) `touch PWNED` it's \"q\" a b;c"


@pytest.fixture
def base():
    path = new_run_dir("extend")
    os.mkdir(path, 0o700)
    owner = Path(path).parent.stat()
    os.chown(path, owner.st_uid, owner.st_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def spec(workdir, env=None, files=(), argv=("env",)) -> LaunchSpec:
    return LaunchSpec(argv=argv, env=env or {}, workdir=workdir, files=files)


# --- validation ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, words", [
    (EnvExtend(), "needs a prepend or an append"),
    (EnvExtend(prepend="a\0b"), "NUL"),
    (EnvExtend(append="x", separator="::"), "separator"),
    (EnvExtend(append="x", separator="|"), "separator"),
    (EnvExtend(append="x", separator=""), "separator"),
])
def test_bad_env_extends_are_refused(value, words):
    with pytest.raises(SshTargetInvalid, match=words):
        spec("/run", {"LD_LIBRARY_PATH": value})


@pytest.mark.parametrize("files, words", [
    ((LaunchFile("config/m.json", "{}"),), "absolute"),
    ((LaunchFile("/run/../etc/passwd", "x"),), "normalised"),
    ((LaunchFile("/run//m.json", "x"),), "normalised"),
    ((LaunchFile("/run/m.json/", "x"),), "normalised"),
    ((LaunchFile("/", "x"),), "absolute"),
    ((LaunchFile("/run/m\0.json", "x"),), "NUL"),
    ((LaunchFile("/run/m\n.json", "x"),), "newline"),
    ((LaunchFile("/run/m.json", "a\0b"),), "NUL"),
    ((LaunchFile("/run/m.json", "x", mode=0o1000),), "mode"),
    ((LaunchFile("/run/m.json", "x", mode=-1),), "mode"),
    ((LaunchFile("/run/m.json", "x", mode="600"),), "mode"),
    ((LaunchFile("/run/m.json", "x"), LaunchFile("/run/m.json", "y")), "twice"),
    ((LaunchFile("/run/m.json", "x"), LaunchFile("/run/m.json", "x", mode=0o644)), "twice"),
    (("/run/m.json",), "LaunchFile"),
])
def test_bad_launch_files_are_refused(files, words):
    with pytest.raises(SshTargetInvalid, match=words):
        spec("/run", files=files)


def test_the_same_file_twice_is_one_file_and_plain_values_still_refuse_nul():
    s = spec("/run", files=[LaunchFile("/run/m.json", "x"), LaunchFile("/run/m.json", "x")])
    assert isinstance(s.files, tuple)
    assert detached_start_command(s).count("/run/m.json") == 2  # once checked for links, once for its content
    with pytest.raises(SshTargetInvalid, match="NUL"):
        spec("/run", {"A": "x\0"})


def test_remove_files_command_takes_only_clean_absolute_paths():
    for bad in ("rel/x", "/a/../b", "/a\nb"):
        with pytest.raises(SshTargetInvalid):
            remove_files_command([bad])
    with pytest.raises(SshTargetInvalid):
        remove_files_command([])


# --- over SSH --------------------------------------------------------------------------------------------

def started_env(conn: SshConnection, s: LaunchSpec, before: str = "") -> dict[str, str]:
    """Start `env` detached (the login shell first runs `before`) and read what it printed."""
    result = conn.run(f"{before}{detached_start_command(s)}", timeout=15)
    assert result.ok, result.stderr
    log = Path(s.log_path)
    deadline = time.monotonic() + 5
    while not log.exists() or not log.read_text().endswith("\n"):
        assert time.monotonic() < deadline, "env printed nothing"
        time.sleep(0.02)
    return dict(line.split("=", 1) for line in log.read_text().splitlines() if "=" in line)


EXTENDS = {
    "LD_LIBRARY_PATH": EnvExtend(prepend="/x/mooncake"),
    "PATH_TAIL": EnvExtend(append="/opt/bin"),
    "BOTH": EnvExtend(prepend="/first", append="/last", separator=";"),
    "SPACED": EnvExtend(prepend=HOSTILE, separator=" "),
    "TAILED": EnvExtend(append=HOSTILE, separator=","),
}


@pytest.mark.procs
def test_env_extends_keep_the_nodes_value_and_stay_literal(target, base):
    old = "/old lib:$(touch PWNED)"  # the node's value is expanded once, never evaluated
    exports = "".join(f"{n}='{old}'; export {n}; " for n in EXTENDS)
    with SshConnection(target) as conn:
        env = started_env(conn, spec(base, {**EXTENDS, "PLAIN": "p $(x)"}), before=exports)
    assert env["LD_LIBRARY_PATH"] == f"/x/mooncake:{old}"
    assert env["PATH_TAIL"] == f"{old}:/opt/bin"
    assert env["BOTH"] == f"/first;{old};/last"
    assert env["SPACED"] == f"{HOSTILE} {old}"
    assert env["TAILED"] == f"{old},{HOSTILE}"
    assert env["PLAIN"] == "p $(x)"
    assert env["PDCP_PROCESS"]  # the marker still reaches the process
    assert not list(Path(base).rglob("PWNED"))


@pytest.mark.procs
@pytest.mark.parametrize("before", ["", "LD_LIBRARY_PATH=; PATH_TAIL=; BOTH=; SPACED=; TAILED=; "
                                        "export LD_LIBRARY_PATH PATH_TAIL BOTH SPACED TAILED; "])
def test_an_unset_or_empty_node_value_gives_no_stray_separator(target, base, before):
    with SshConnection(target) as conn:
        env = started_env(conn, spec(base, EXTENDS), before=before)
    assert env["LD_LIBRARY_PATH"] == "/x/mooncake"
    assert env["PATH_TAIL"] == "/opt/bin"
    assert env["BOTH"] == "/first;/last"
    assert env["SPACED"] == HOSTILE
    assert env["TAILED"] == HOSTILE


@pytest.mark.procs
def test_a_start_needs_its_files_as_planned_and_refuses_a_symlinked_one(target, base):
    config = Path(base, "config")
    mooncake = LaunchFile(f"{config}/mooncake.json", '{"master": "127.0.0.1:50088"}\n')
    s = spec(base, files=(mooncake,), argv=("sleep", "300"))
    with SshConnection(target) as conn:
        missing = conn.run(detached_start_command(s), timeout=15)
        assert not missing.ok and "launch files are missing or differ" in missing.stderr
        conn.run(f"mkdir -p {config}", timeout=10)
        conn.put_text(str(mooncake.path), "{}\n", mode=0o600)
        changed = conn.run(detached_start_command(s), timeout=15)
        assert not changed.ok and "differ from the plan" in changed.stderr
        assert not Path(s.pid_path).exists()

        conn.put_text(str(mooncake.path), mooncake.content, mode=mooncake.mode)
        started = conn.run(detached_start_command(s), timeout=15)
        assert started.ok, started.stderr
        try:
            assert conn.run(stop_command(s.pid_path, 2), timeout=15).stdout.startswith("stopped")
        finally:
            try:
                os.kill(int(started.stdout), signal.SIGKILL)
            except ProcessLookupError:
                pass

        victim = Path(base, "precious")
        victim.write_text(mooncake.content)
        Path(mooncake.path).unlink()
        Path(mooncake.path).symlink_to(victim)
        linked = conn.run(detached_start_command(s), timeout=15)
        assert not linked.ok and "symbolic link" in linked.stderr


@pytest.mark.procs
def test_remove_files_removes_regular_files_says_absent_and_refuses_links(target, base):
    a, b, link = Path(base, "a.conf"), Path(base, "gone.conf"), Path(base, "link.conf")
    a.write_text("x")
    victim = Path(base, "precious")
    victim.write_text("keep")
    link.symlink_to(victim)
    with SshConnection(target) as conn:
        result = conn.run(remove_files_command([str(a), str(b)]), timeout=10)
        assert result.ok, result.stderr
        assert result.stdout.splitlines() == [f"removed {a}", f"absent {b}"]
        assert not a.exists()

        a.write_text("x")
        refused = conn.run(remove_files_command([str(a), str(link)]), timeout=10)
        assert not refused.ok and "symbolic link" in refused.stderr
        assert a.exists() and link.is_symlink() and victim.read_text() == "keep"

        Path(base, "dir.conf").mkdir()
        not_file = conn.run(remove_files_command([f"{base}/dir.conf"]), timeout=10)
        assert not not_file.ok and "not a regular file" in not_file.stderr
