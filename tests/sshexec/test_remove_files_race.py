"""Two stops removing the same launch file at once (node0 and node1 of the simulated cluster share a filesystem, as
real nodes on a shared run dir do): a file that vanishes between the script's own tests is absent, not refused as
"not a regular file". Deterministic: bash's `[` is replaced by a function that removes the file right after
answering `-e` for it, as the other remover would."""

import subprocess

import pytest

from sshexec import remove_files_command

VANISH_AFTER_E = r'''
function [ {
  local args=("${@:1:$#-1}")
  builtin test "${args[@]}"; local r=$?
  if builtin test "${args[0]}" = -e -a "$r" = 0 -a "${args[1]}" = "$VANISH"; then rm -f -- "$VANISH"; fi
  return $r
}
'''


@pytest.mark.procs
def test_a_file_removed_by_another_stop_meanwhile_counts_as_absent(tmp_path):
    conf = tmp_path / "mooncake.json"
    conf.write_text("{}")
    done = subprocess.run(["bash", "-c", VANISH_AFTER_E + remove_files_command([str(conf)])], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "VANISH": str(conf)}, timeout=10)
    assert done.returncode == 0, done.stderr
    assert "not a regular file" not in done.stderr and not conf.exists()


@pytest.mark.procs
def test_a_directory_in_its_place_is_still_refused(tmp_path):
    conf = tmp_path / "mooncake.json"
    conf.mkdir()
    done = subprocess.run(["bash", "-c", remove_files_command([str(conf)])], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"}, timeout=10)
    assert done.returncode == 1 and "it is not a regular file" in done.stderr and conf.is_dir()
