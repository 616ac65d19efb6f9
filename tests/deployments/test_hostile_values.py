"""Hostile text in every free-text field comes out of the rendered shell line as exactly one word, unchanged.

Hand-rolled property test (no hypothesis): each hostile string is put into the model path, served name, an env
value, an extra-arg value and the run dir; the line is then tokenised and must equal the line rendered with a
harmless marker, marker replaced by the hostile string - same words, same operators, nothing added. A second
test really runs the lines under sh with stand-in executables and checks argv/env arrive intact and that no
injected command ran.
"""

from __future__ import annotations

import copy
import os
import pwd
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from apps.deployments.topology import build_plan, detached_start_command, spec_from_dict
from sshexec import process_marker

MARKER = "zzMARKERzz"

HOSTILE = [
    "a b", "'", '"', "'; touch CANARY; '", '"; touch CANARY; "', "$(touch CANARY)", "`touch CANARY`",
    "; touch CANARY", "&& touch CANARY", "|| touch CANARY", "| touch CANARY", "& touch CANARY",
    "\ntouch CANARY\n", "\rtouch CANARY", "$HOME", "${IFS}touch${IFS}CANARY", "$((1+1))", "*", "?", "[a]", "~",
    "~root", "\\", "a\\'b", "\\$(touch CANARY)", ">CANARY", "<CANARY", "2>&1", "!", "!!", "#comment", "{a,b}",
    "x=y", "-x", "-", "é ünïcode ✓", "\t", " ", "  leading and trailing  ", "a;b|c&d", "$'\\x41'", "%s%n",
    "(subshell)", "EOF\n<<EOF",
]


MARKER_WORD = re.compile(r"PDCP_PROCESS=[0-9a-f]{16}")


def tokens(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""  # the lines hold no comment; a '#' inside a word (${s#* }) is none to sh either
    return list(lexer)


def without_marker(words: list[str]) -> list[str]:
    """The start's PDCP_PROCESS word is a hash of the pid file's path, so it differs whenever the run dir does."""
    return [MARKER_WORD.sub("PDCP_PROCESS=<marker>", w) for w in words]


def option_like(value: str) -> bool:
    """Refused on purpose where the engine would read it as an option (model path and name: test_operator_limits);
    there such a value goes in after a leading 'm', everywhere else unchanged."""
    return value.startswith("-")


# Extra-arg values are checked by kind (topology/profiles/engine_options.py), so no hostile text reaches one; this
# JSON value still carries quotes, braces, brackets, commas and spaces through every line.
EXTRA_ARGS = ["--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1, 2]}']


def hostile_data(data: dict, value: str, run_dir: str, lead: str = "") -> dict:
    data["model"]["path"] = lead + value
    data["model"]["served_name"] = lead + value
    data["run_dir"] = run_dir
    for inst in data["instances"]:
        inst["env"] = {"VLLM_RPC_TIMEOUT": value}  # an env name the profiles allow; its value is free text
        inst["extra_args"] = list(EXTRA_ARGS)
    return data


def lines(plan) -> dict[str, str]:
    return {p.key: detached_start_command(p.launch) for p in plan.processes}


@pytest.mark.parametrize("profile", ["vllm-ascend", "sim"])
@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_value_is_one_word_in_every_line(fixed_data, nodes, profile, value):
    fixed_data["launch_profile"] = profile
    lead = "m" if option_like(value) else ""
    # A run dir with control characters is refused by the parser (test_run_dir_refuses_control_characters).
    in_dir = value if value.isprintable() else "ctl"
    benign = build_plan(spec_from_dict(hostile_data(copy.deepcopy(fixed_data), MARKER,
                                                    f"/tmp/pd-{MARKER if value.isprintable() else 'ctl'}", lead)), nodes)
    hostile = build_plan(spec_from_dict(hostile_data(fixed_data, value, f"/tmp/pd-{in_dir}", lead)), nodes)
    benign_lines, hostile_lines = lines(benign), lines(hostile)
    assert benign_lines.keys() == hostile_lines.keys()
    for key, line in hostile_lines.items():
        expected = [t.replace(MARKER, value) for t in without_marker(tokens(benign_lines[key]))]
        assert without_marker(tokens(line)) == expected, key
    for p in hostile.processes:
        assert f"PDCP_PROCESS={process_marker(p.launch.pid_path)}" in tokens(hostile_lines[p.key])
    engine = next(p for p in hostile.processes if p.role == "prefill").launch.argv
    assert engine[2] == lead + value
    assert engine[engine.index("--served-model-name") + 1] == lead + value
    assert engine[engine.index("--compilation-config") + 1] == EXTRA_ARGS[1]
    assert next(p for p in hostile.processes if p.role == "prefill").launch.env["VLLM_RPC_TIMEOUT"] == value


@pytest.fixture
def private_dir():
    """A fresh 0700 directory in this user's home: the start refuses a run dir below /tmp (world-writable)."""
    path = Path(tempfile.mkdtemp(prefix="pdcp-hostile-", dir=pwd.getpwuid(os.getuid()).pw_dir))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.procs
def test_hostile_lines_really_run_as_rendered(fixed_data, nodes, tmp_path, private_dir):
    """Run every sim line under sh with fake vllm/memcached/mooncake_master/pdproxy that dump argv and env."""
    bin_dir, dumps = tmp_path / "bin", tmp_path / "dumps"
    bin_dir.mkdir()
    dumps.mkdir()
    canary = tmp_path / "CANARY"
    for name in ("vllm", "memcached", "mooncake_master", "pdproxy", "python"):
        script = bin_dir / name
        # write then rename, so the test never reads a half-written dump
        script.write_text('#!/bin/sh\nd="$FAKE_DUMP/$$"\nprintf "%s\\0" "$@" > "$d.tmp" && mv "$d.tmp" "$d.argv"\n'
                          'env -0 > "$d.tmp" && mv "$d.tmp" "$d.env"\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    values = [v.replace("CANARY", str(canary)) for v in HOSTILE]
    data = hostile_data(fixed_data, values[5], str(private_dir / f"run {values[3]}"))
    data["launch_profile"] = "sim"
    data["model"]["served_name"] = values[12]
    for k, inst in enumerate(data["instances"]):
        inst["env"] = {"VLLM_RPC_TIMEOUT": values[k % len(values)], "HCCL_CONNECT_TIMEOUT": values[-1 - k]}
    plan = build_plan(spec_from_dict(data), nodes)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DUMP": str(dumps), "HOME": str(tmp_path)}
    for p in plan.processes:
        for f in p.launch.files:  # what the deploy job uploads before the start (which checks them)
            Path(f.path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            Path(f.path).write_text(f.content)
            Path(f.path).chmod(f.mode)
        done = subprocess.run(["sh", "-c", detached_start_command(p.launch)], env=env, capture_output=True,
                              text=True, timeout=20, cwd=tmp_path)
        assert done.returncode == 0, (p.key, done.stderr)
        pid = done.stdout.strip()
        argv_file = dumps / f"{pid}.argv"
        for _ in range(100):
            if (dumps / f"{pid}.env").exists():
                break
            subprocess.run(["sleep", "0.05"])
        argv = argv_file.read_bytes().split(b"\0")[:-1]
        assert [a.decode() for a in argv] == list(p.launch.argv[1:]), p.key
        got_env = dict(e.decode().split("=", 1) for e in (dumps / f"{pid}.env").read_bytes().split(b"\0")[:-1])
        for name, value in p.launch.env.items():
            assert got_env[name] == value, (p.key, name)
        assert Path(p.launch.log_file).exists()
    assert not canary.exists(), "an injected command ran"


@pytest.mark.parametrize("value", [v for v in HOSTILE if not v.isprintable()])
def test_run_dir_refuses_control_characters(fixed_data, value):
    from apps.deployments.topology import SpecError
    fixed_data["run_dir"] = f"/tmp/pd-{value}"
    with pytest.raises(SpecError) as info:
        spec_from_dict(fixed_data)
    assert info.value.errors[0][0] == "run_dir" and "control characters" in info.value.errors[0][1]
