"""MindIE's scripts directory is checked on the host, in the deploy's (and delete's) own shell line, right before
its Python runs: the directory, every directory above it and deploy_ac_job.py / delete.sh must be root's and
writable by no one else, and none a symbolic link (issue 35 §1). Run with the real sh and stat, as root."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from sshexec import mindie_commands

pytestmark = [pytest.mark.procs,
              pytest.mark.skipif(os.geteuid() != 0, reason="chown to root and to others needs root (CI runs as root)")]


@pytest.fixture
def scripts():
    """A root-owned 0755 scripts dir below /var/lib (root's, 0755, all the way up), with marker-writing scripts."""
    top = Path("/var/lib") / f"pdcp-guard-{uuid.uuid4().hex[:8]}"
    target = top / "kubernetes_deploy_scripts"
    target.mkdir(parents=True)
    top.chmod(0o755)
    target.chmod(0o755)
    for name in mindie_commands.SCRIPTS:
        (target / name).write_text(f"open('{top}/ran-{name}', 'w').close()\n" if name.endswith(".py") else
                                   f"touch {top}/ran-{name}\n")
        (target / name).chmod(0o755)
    yield target
    shutil.rmtree(top)


def run(line: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=30)


def test_a_root_owned_directory_runs_the_deploy(scripts):
    result = run(mindie_commands.deploy_command(str(scripts), "/nonexistent/user_config.json"))
    assert result.returncode == 0, result.stderr
    assert (scripts.parent / "ran-deploy_ac_job.py").exists()
    assert run(mindie_commands.delete_command(str(scripts), "mindie")).returncode == 0
    assert (scripts.parent / "ran-delete.sh").exists()


@pytest.mark.parametrize(("spoil", "words"), [
    (lambda d: d.chmod(0o777), "writable by group or others (mode 777)"),
    (lambda d: (d / "deploy_ac_job.py").chmod(0o666), "deploy_ac_job.py: it is writable by group or others"),
    (lambda d: os.chown(d, 65534, 65534), "owned by uid 65534, not root"),
    (lambda d: (d / "delete.sh").unlink(), "delete.sh: it does not exist"),
    (lambda d: d.parent.chmod(0o1777), "writable by group or others (mode 1777)"),
])
def test_a_directory_others_could_change_is_refused_before_anything_runs(scripts, spoil, words):
    spoil(scripts)
    for line in (mindie_commands.deploy_command(str(scripts), "/x.json"), mindie_commands.delete_command(str(scripts), "m")):
        result = run(line)
        assert result.returncode != 0
        assert "pdcp: refusing" in result.stderr and words in result.stderr, result.stderr
    assert not list(scripts.parent.glob("ran-*"))


def test_a_symbolic_link_on_the_way_is_refused(scripts):
    link = scripts.parent / "via-link"
    link.symlink_to(scripts)
    result = run(mindie_commands.deploy_command(str(link), "/x.json"))
    assert result.returncode != 0 and f"refusing {link}: it is a symbolic link" in result.stderr
    assert not list(scripts.parent.glob("ran-*"))


def test_tmp_is_refused():
    result = run(mindie_commands.scripts_dir_guard("/tmp"))
    assert result.returncode != 0 and "refusing /tmp: it is writable by group or others" in result.stderr
