"""Shell command lines for detached processes, built from typed values (every word via shlex.quote).

Traps these avoid (reference/stack-notes.md §2):
- `a && setsid ... &` backgrounds the whole `&&` chain, which keeps the channel's stdout open (the
  command never returns) and makes `$!` the subshell: the backgrounded command follows a `;`.
- The PID file is written by the child itself (`echo $$` then `exec`), so it names the real
  process, and a child that cannot write it exits instead of running untracked.
- `kill -0` succeeds on zombies: liveness is read from `ps -o stat=`.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from types import MappingProxyType

from .errors import SshTargetInvalid

__all__ = [
    "LaunchSpec",
    "ProcessState",
    "detached_start_command",
    "parse_process_state",
    "process_state_command",
    "stop_command",
    "tail_command",
]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
q = shlex.quote

# Shell function shared by the stop and state commands: true while $1 runs and is not a zombie.
_ALIVE = 'alive() { s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; case $s in ""|Z*) return 1;; esac; }'


@dataclass(frozen=True)
class LaunchSpec:
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: PurePosixPath | str = "."
    log_file: PurePosixPath | str = "process.log"  # relative paths are relative to workdir
    pid_file: PurePosixPath | str = "process.pid"

    def __post_init__(self):
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        if not self.argv:
            raise SshTargetInvalid("argv is empty")
        # `env` would read a first word with '=' as an assignment, and one starting with '-' as an option.
        if "=" in self.argv[0] or self.argv[0].startswith("-"):
            raise SshTargetInvalid(f"argv[0] may not contain '=' or start with '-': {self.argv[0]!r}")
        for name, value in self.env.items():
            if not _ENV_NAME.match(name):
                raise SshTargetInvalid(f"environment variable name {name!r} is not a shell identifier")
            if "\0" in value:
                raise SshTargetInvalid(f"environment value of {name} contains a NUL byte")
        for word in (*self.argv, str(self.workdir), str(self.log_file), str(self.pid_file)):
            if "\0" in word:
                raise SshTargetInvalid(f"{word!r} contains a NUL byte")
        for name in ("workdir", "log_file", "pid_file"):
            if not str(getattr(self, name)):
                raise SshTargetInvalid(f"{name} is empty")


def _parent(path: str) -> str:
    return str(PurePosixPath(path).parent)


def detached_start_command(spec: LaunchSpec) -> str:
    """Start argv detached (own session, no terminal, output to log_file); print its PID.

    Exits non-zero, printing the reason to stderr, if the PID file did not appear within 5 s.
    """
    wd, log, pid = q(str(spec.workdir)), q(str(spec.log_file)), q(str(spec.pid_file))
    env_words = " ".join(q(f"{k}={v}") for k, v in sorted(spec.env.items()))
    argv_words = " ".join(q(a) for a in spec.argv)
    child = q('echo $$ > "$1" || exit 125; shift; exec "$@"')
    before = "; ".join([
        f"mkdir -p -- {wd} || exit 1",
        f"cd -- {wd} || exit 1",
        f"mkdir -p -- {q(_parent(str(spec.log_file)))} {q(_parent(str(spec.pid_file)))} || exit 1",
        f"rm -f -- {pid}",
        f'if [ -e {pid} ]; then echo "cannot remove stale pid file" >&2; exit 1; fi',
    ])
    launch = (f"setsid nohup sh -c {child} sh {pid} env -- {env_words + ' ' if env_words else ''}{argv_words}"
              f" > {log} 2>&1 < /dev/null")
    after = "; ".join([
        f"i=0; while [ ! -s {pid} ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done",
        f'if [ -s {pid} ]; then cat -- {pid}; else echo "no pid file after 5s" >&2; exit 1; fi',
    ])
    # `&` is itself the separator after the launch ("&;" is a syntax error).
    return f"{before}; {launch} & {after}"


def stop_command(pid_file: PurePosixPath | str, grace_seconds: float = 10.0) -> str:
    """TERM the process (its whole process group when it leads one), wait, then KILL.

    Prints one line: "stopped <pid>", "not-running <pid>" or "no-pid-file"; exit 1 if it survived KILL.
    """
    pf = q(str(pid_file))
    ticks = max(1, math.ceil(grace_seconds * 10))
    return "; ".join([
        _ALIVE,
        f'if [ ! -s {pf} ]; then echo "no-pid-file"; exit 0; fi',
        f"p=$(cat -- {pf})",
        'case $p in ""|*[!0-9]*) echo "bad pid file: $p" >&2; exit 2;; esac',
        f'if ! alive "$p"; then rm -f -- {pf}; echo "not-running $p"; exit 0; fi',
        # setsid made the process a group leader: signal the group so its children go too.
        'g=$(ps -o pgid= -p "$p" | tr -d " "); if [ "$g" = "$p" ]; then t="-$p"; else t="$p"; fi',
        'kill -s TERM -- "$t" 2>/dev/null',
        f'n=0; while alive "$p" && [ $n -lt {ticks} ]; do sleep 0.1; n=$((n+1)); done',
        'if alive "$p"; then kill -s KILL -- "$t" 2>/dev/null; n=0; '
        'while alive "$p" && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done; fi',
        'if alive "$p"; then echo "still-running $p" >&2; exit 1; fi',
        f'rm -f -- {pf}; echo "stopped $p"',
    ])


@dataclass(frozen=True)
class ProcessState:
    state: str  # "running", "stopped", "zombie" or "no-pid-file"
    pid: int | None


def process_state_command(pid_file: PurePosixPath | str) -> str:
    """Print "running <pid>", "zombie <pid>", "stopped <pid>" or "no-pid-file"."""
    pf = q(str(pid_file))
    return "; ".join([
        f'if [ ! -s {pf} ]; then echo "no-pid-file"; exit 0; fi',
        f"p=$(cat -- {pf})",
        'case $p in ""|*[!0-9]*) echo "bad pid file: $p" >&2; exit 2;; esac',
        's=$(ps -o stat= -p "$p" 2>/dev/null)',
        'case $s in "") echo "stopped $p";; Z*) echo "zombie $p";; *) echo "running $p";; esac',
    ])


def parse_process_state(stdout: str) -> ProcessState:
    words = stdout.split()
    if words == ["no-pid-file"]:
        return ProcessState("no-pid-file", None)
    if len(words) == 2 and words[0] in ("running", "stopped", "zombie") and words[1].isdecimal():
        return ProcessState(words[0], int(words[1]))
    raise ValueError(f"unexpected process state output: {stdout.strip()!r}")


def tail_command(path: PurePosixPath | str, lines: int = 200) -> str:
    if int(lines) < 1:
        raise SshTargetInvalid("lines must be at least 1")
    return f"tail -n {int(lines)} -- {q(str(path))}"
