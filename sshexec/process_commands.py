"""Shell command lines for detached processes, built from typed values (every word via shlex.quote).

Traps these avoid (measured: docs/ssh-execution.md):
- `a && setsid ... &` backgrounds the whole `&&` chain, which keeps the channel's stdout open (the
  command never returns) and makes `$!` the subshell: the backgrounded command follows a `;`.
- The PID file is written by the child itself (`echo $$` then `exec`), so it names the real
  process, and a child that cannot write it exits instead of running untracked.
- `kill -0` succeeds on zombies: liveness is read from `ps -o stat=`.

Other local users: everything is created under `umask 077`; a run dir is refused unless every
directory from / down to it is a real directory (no symbolic link) owned by root or the login user and not
writable by group or others, and the run dir, its logs and pids dirs are the login user's; log and pid files
that are symbolic links are refused. The start puts PDCP_PROCESS=<process_marker(pid file)> in the process's
environment; stop signals, and state reports "running", only a pid of the login user whose
/proc/<pid>/environ carries it, so a stale or planted pid file never gets another process killed.
"""

from __future__ import annotations

import hashlib
import math
import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from types import MappingProxyType

from .errors import SshTargetInvalid

__all__ = [
    "EnvExtend",
    "LaunchFile",
    "LaunchSpec",
    "ProcessState",
    "detached_start_command",
    "parse_process_state",
    "private_dirs_command",
    "process_marker",
    "process_state_command",
    "remove_files_command",
    "stop_command",
    "tail_command",
]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SEPARATORS = ":;, "
q = shlex.quote

MARKER_VARIABLE = "PDCP_PROCESS"

# Shell function shared by the stop and state commands: true while $1 runs and is not a zombie.
_ALIVE = 'alive() { s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; case $s in ""|Z*) return 1;; esac; }'
# True when pid $1 is the login user's and its environment holds the line $2 (PDCP_PROCESS=<marker>). Asked again
# for most of a second while the pid lives: a process inside execve (a launcher's `exec` chain: sh, a shim, python,
# the binary) reads as an empty /proc/<pid>/environ for a moment, and one look then called a starting
# mooncake_master "stopped" (measured: docs/ssh-execution.md).
_OURS = ('ours() { for w in 0 0.02 0.05 0.1 0.2 0.4; do [ "$w" = 0 ] || sleep "$w"; '
         '[ -O "/proc/$1" ] && grep -qzxF -e "$2" "/proc/$1/environ" 2>/dev/null && return 0; '
         '[ -d "/proc/$1" ] || return 1; done; return 1; }')
# pdcp_dirs: refuse unless each existing one of "$@" is a real directory owned by root or the login user and not
# writable by group or others (one stat for all). pdcp_owned: each of "$@" is the login user's. pdcp_files: none of
# "$@" is a symbolic link or other than a regular file (-f before -e: a file another remover takes away between
# the two tests counts as absent, not as "not a regular file"; sim nodes share one filesystem, so may real ones).
_PDCP_DIRS = (
    'pdcp_dirs() { for d; do shift; '
    'if [ -L "$d" ]; then echo "pdcp: refusing $d: it is a symbolic link" >&2; return 1; fi; '
    'if [ -e "$d" ]; then if [ ! -d "$d" ]; then echo "pdcp: refusing $d: it is not a directory" >&2; return 1; fi; '
    'set -- "$@" "$d"; fi; done; '
    '[ $# = 0 ] && return 0; s=$(stat --printf \'%u %a \' -- "$@") || return 1; '
    'for d; do u=${s%% *}; s=${s#* }; a=${s%% *}; s=${s#* }; '
    'if [ "$u" != 0 ] && [ ! -O "$d" ]; then '
    'echo "pdcp: refusing $d: it is owned by uid $u, neither root nor the login user" >&2; return 1; fi; '
    'if [ $((0$a & 022)) != 0 ]; then '
    'echo "pdcp: refusing $d: it is writable by group or others (mode $a)" >&2; return 1; fi; done; }'
)
_PDCP_OWNED = ('pdcp_owned() { for d; do if [ ! -O "$d" ]; then '
               'echo "pdcp: refusing $d: it is not owned by the login user" >&2; return 1; fi; done; }')
_PDCP_FILES = ('pdcp_files() { for f; do if [ -L "$f" ]; then '
               'echo "pdcp: refusing $f: it is a symbolic link" >&2; return 1; fi; '
               'if [ ! -f "$f" ] && [ -e "$f" ]; then echo "pdcp: refusing $f: it is not a regular file" >&2; '
               'return 1; fi; done; }')


def process_marker(pid_file: PurePosixPath | str) -> str:
    """What the start puts in the environment as PDCP_PROCESS: one value per pid file (so per run dir and process)."""
    return hashlib.sha256(str(PurePosixPath(pid_file)).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _marker_line(pid_file: PurePosixPath | str) -> str:
    return f"{MARKER_VARIABLE}={process_marker(pid_file)}"


def _components(dirs) -> list[str]:
    """Every directory from / down to each of dirs, top-down, each once."""
    out: dict[str, None] = {}
    for d in dirs:
        path = PurePosixPath(d)
        for part in (*reversed(path.parents), path):
            out[str(part)] = None
    return list(out)


def private_dirs_command(dirs, files=(), *, create: bool = True) -> str:
    """`umask 077`, then exit 1 (the reason on stderr, naming the path) unless every directory from / down to each
    of dirs is a real directory owned by root or the login user and not writable by group or others; create what
    is missing (0700); each of dirs must then be the login user's, and none of files a symbolic link.
    create=False only checks what exists (preflight)."""
    dirs = [str(PurePosixPath(d)) for d in dirs]
    for d in dirs:
        if not d.startswith("/"):
            raise SshTargetInvalid(f"{d!r} is not an absolute path")
    words = " ".join(q(d) for d in dirs)
    parts = ["umask 077", _PDCP_DIRS, _PDCP_OWNED, _PDCP_FILES,
             f"pdcp_dirs {' '.join(q(c) for c in _components(dirs))} || exit 1"]
    if create:
        parts += [f"mkdir -p -- {words} || exit 1", f"pdcp_owned {words} || exit 1"]
    else:
        parts.append(f'for d in {words}; do if [ -e "$d" ]; then pdcp_owned "$d" || exit 1; fi; done')
    if files:
        parts.append(f"pdcp_files {' '.join(q(str(f)) for f in files)} || exit 1")
    return "; ".join(parts)


@dataclass(frozen=True)
class EnvExtend:
    """An environment value that keeps the node's own: `prepend` + sep + $NAME + sep + `append`, where the
    separators appear only next to a non-empty part (LD_LIBRARY_PATH=/x/mooncake:$LD_LIBRARY_PATH)."""

    prepend: str = ""
    append: str = ""
    separator: str = ":"


@dataclass(frozen=True)
class LaunchFile:
    """A file the process reads (mooncake.json, mmc-local.conf), written before it starts, removed by stop."""

    path: PurePosixPath | str  # absolute
    content: str
    mode: int = 0o600


@dataclass(frozen=True)
class LaunchSpec:
    argv: tuple[str, ...]
    env: Mapping[str, str | EnvExtend] = field(default_factory=dict)
    workdir: PurePosixPath | str = field(kw_only=True)  # absolute: the run dir, checked from / down
    log_file: PurePosixPath | str = "process.log"  # relative paths are relative to workdir
    pid_file: PurePosixPath | str = "process.pid"
    files: tuple[LaunchFile, ...] = ()

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
            if name == MARKER_VARIABLE:
                raise SshTargetInvalid(f"{MARKER_VARIABLE} is set by the start itself (it tells our processes)")
            if isinstance(value, EnvExtend):
                _check_extend(name, value)
            elif not isinstance(value, str):
                raise SshTargetInvalid(f"environment value of {name} must be a string or an EnvExtend")
            elif "\0" in value:
                raise SshTargetInvalid(f"environment value of {name} contains a NUL byte")
        object.__setattr__(self, "files", tuple(self.files))
        _check_files(self.files)
        for word in (*self.argv, str(self.workdir), str(self.log_file), str(self.pid_file)):
            if "\0" in word:
                raise SshTargetInvalid(f"{word!r} contains a NUL byte")
        for name in ("workdir", "log_file", "pid_file"):
            if not str(getattr(self, name)):
                raise SshTargetInvalid(f"{name} is empty")
        # Relative to the login's home it could not be checked from / down, nor stopped by the same pid file name.
        if not str(self.workdir).startswith("/"):
            raise SshTargetInvalid(f"workdir must be an absolute path, got {str(self.workdir)!r}")

    @property
    def log_path(self) -> PurePosixPath:
        return PurePosixPath(self.workdir) / self.log_file  # an absolute log_file stays as it is

    @property
    def pid_path(self) -> PurePosixPath:
        """The pid file as stop_command and process_state_command must be given it."""
        return PurePosixPath(self.workdir) / self.pid_file


def _check_extend(name: str, value: EnvExtend) -> None:
    if not isinstance(value.prepend, str) or not isinstance(value.append, str):
        raise SshTargetInvalid(f"prepend and append of {name} must be strings")
    if not value.prepend and not value.append:
        raise SshTargetInvalid(f"extending {name} needs a prepend or an append")
    if "\0" in value.prepend + value.append:
        raise SshTargetInvalid(f"environment value of {name} contains a NUL byte")
    if not isinstance(value.separator, str) or len(value.separator) != 1 or value.separator not in _SEPARATORS:
        raise SshTargetInvalid(f"separator of {name} must be one of {list(_SEPARATORS)}, got {value.separator!r}")


def _check_path(path) -> str:
    """An absolute, normalised path without '..', NUL or newline (the start checks files line by line)."""
    text = str(path)
    if "\0" in text or "\n" in text:
        raise SshTargetInvalid(f"{text!r} contains a NUL byte or a newline")
    if not text.startswith("/") or text == "/" or posixpath.normpath(text) != text or ".." in text.split("/"):
        raise SshTargetInvalid(f"file path must be absolute and normalised (no '..'), got {text!r}")
    return text


def _check_files(files: tuple[LaunchFile, ...]) -> None:
    seen: dict[str, LaunchFile] = {}
    for f in files:
        if not isinstance(f, LaunchFile):
            raise SshTargetInvalid(f"files must be LaunchFile values, got {f!r}")
        path = _check_path(f.path)
        if not isinstance(f.content, str) or "\0" in f.content:
            raise SshTargetInvalid(f"content of {path} must be text without NUL bytes")
        if isinstance(f.mode, bool) or not isinstance(f.mode, int) or not 0 <= f.mode <= 0o777:
            raise SshTargetInvalid(f"mode of {path} must be 0..0o777, got {f.mode!r}")
        other = seen.setdefault(path, f)
        if (other.content, other.mode) != (f.content, f.mode):
            raise SshTargetInvalid(f"{path} is named twice with different content or mode")


def _extended_value(name: str, value: EnvExtend) -> str:
    """One shell word: prepend, the node's own $name, append, a separator only next to a non-empty part. The
    node's value is expanded inside double quotes (never split nor evaluated); our text is single-quoted."""
    sep, word = value.separator, ""
    if value.prepend:
        word = q(value.prepend) + f'"${{{name}:+{sep}${name}}}"'
        if value.append:
            word += q(sep + value.append)
    else:
        word = f'"${{{name}:+${name}{sep}}}"' + q(value.append)
    return f"{name}={word}"


def _unique_files(files) -> list[LaunchFile]:
    return list({str(f.path): f for f in files}.values())


def detached_start_command(spec: LaunchSpec) -> str:
    """Start argv detached (own session, no terminal, output to log_file); print its PID.

    Exits non-zero, printing the reason to stderr and starting nothing, when the run dir is refused (see the
    module's doc), or if the PID file did not appear within 5 s.
    """
    wd, log, pid = q(str(spec.workdir)), q(str(spec.log_path)), q(str(spec.pid_path))
    env = sorted(spec.env.items())
    env_words = " ".join(q(f"{k}={v}") for k, v in env if isinstance(v, str))
    # Assignments before setsid reach the process through the environment; `env --` would not expand them.
    extended = "".join(_extended_value(k, v) + " " for k, v in env if isinstance(v, EnvExtend))
    files = _unique_files(spec.files)
    argv_words = " ".join(q(a) for a in spec.argv)
    child = q('echo $$ > "$1" || exit 125; shift; exec "$@"')
    before = "; ".join([
        private_dirs_command([spec.workdir, spec.log_path.parent, spec.pid_path.parent],
                             files=[spec.log_path, spec.pid_path, *(f.path for f in files)]),
        f"cd -- {wd} || exit 1",
        f"rm -f -- {pid}",
        f'if [ -e {pid} ]; then echo "cannot remove stale pid file" >&2; exit 1; fi',
    ])
    if files:
        # The process reads only what the plan says (and a changed file changes this line, so its fingerprint).
        sums = " ".join(f"{hashlib.sha256(f.content.encode()).hexdigest()} {q(str(f.path))}" for f in files)
        before += (f"; printf '%s  %s\\n' {sums} | sha256sum -c --status - || "
                   '{ echo "pdcp: the launch files are missing or differ from the plan" >&2; exit 1; }')
    # The marker is in the environment from the first instant the pid file names the process (sh writes it,
    # then execs env, then argv: all inherit it). SPT_NOENV=1 keeps Python's setproctitle from overwriting it.
    launch = (f"{extended}{q(_marker_line(spec.pid_path))} SPT_NOENV=1 setsid nohup sh -c {child} sh {pid} env -- "
              f"{env_words + ' ' if env_words else ''}{argv_words} > {log} 2>&1 < /dev/null")
    after = "; ".join([
        f"i=0; while [ ! -s {pid} ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done",
        f'if [ -s {pid} ]; then cat -- {pid}; else echo "no pid file after 5s" >&2; exit 1; fi',
    ])
    # `&` is itself the separator after the launch ("&;" is a syntax error).
    return f"{before}; {launch} & {after}"


def stop_command(pid_file: PurePosixPath | str, grace_seconds: float = 10.0) -> str:
    """TERM the process (its whole process group when it leads one), wait, then KILL.

    pid_file is named as the start resolved it (LaunchSpec.pid_path). Prints one line: "stopped <pid>",
    "not-running <pid>", "foreign <pid>" (alive, but not what our start put there: not signalled, the pid file
    removed) or "no-pid-file"; exit 1 if it survived KILL.
    """
    pf, mark = q(str(pid_file)), q(_marker_line(pid_file))
    ticks = max(1, math.ceil(grace_seconds * 10))
    return "; ".join([
        _ALIVE,
        _OURS,
        f'mine() {{ alive "$1" && ours "$1" {mark}; }}',
        f'if [ ! -s {pf} ]; then echo "no-pid-file"; exit 0; fi',
        f"p=$(cat -- {pf})",
        'case $p in ""|*[!0-9]*) echo "bad pid file: $p" >&2; exit 2;; esac',
        f'if ! alive "$p"; then rm -f -- {pf}; echo "not-running $p"; exit 0; fi',
        f'if ! ours "$p" {mark}; then rm -f -- {pf}; echo "foreign $p"; exit 0; fi',
        # setsid made the process a group leader: signal the group so its children go too.
        'g=$(ps -o pgid= -p "$p" | tr -d " "); if [ "$g" = "$p" ]; then t="-$p"; else t="$p"; fi',
        'kill -s TERM -- "$t" 2>/dev/null',
        f'n=0; while alive "$p" && [ $n -lt {ticks} ]; do sleep 0.1; n=$((n+1)); done',
        # Checked again before KILL: in the grace the pid may have gone and been given to another process.
        'if mine "$p"; then kill -s KILL -- "$t" 2>/dev/null; n=0; '
        'while alive "$p" && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done; fi',
        'if mine "$p"; then echo "still-running $p" >&2; exit 1; fi',
        f'rm -f -- {pf}; echo "stopped $p"',
    ])


@dataclass(frozen=True)
class ProcessState:
    state: str  # "running", "stopped", "zombie" or "no-pid-file"
    pid: int | None


def process_state_command(pid_file: PurePosixPath | str) -> str:
    """Print "running <pid>", "zombie <pid>", "stopped <pid>" or "no-pid-file".

    A live pid that is not what our start put there (see stop_command) is "stopped": ours is not running.
    """
    pf, mark = q(str(pid_file)), q(_marker_line(pid_file))
    return "; ".join([
        _OURS,
        f'if [ ! -s {pf} ]; then echo "no-pid-file"; exit 0; fi',
        f"p=$(cat -- {pf})",
        'case $p in ""|*[!0-9]*) echo "bad pid file: $p" >&2; exit 2;; esac',
        's=$(ps -o stat= -p "$p" 2>/dev/null)',
        'case $s in "") echo "stopped $p";; Z*) echo "zombie $p";; '
        f'*) if ours "$p" {mark}; then echo "running $p"; else echo "stopped $p"; fi;; esac',
    ])


def parse_process_state(stdout: str) -> ProcessState:
    words = stdout.split()
    if words == ["no-pid-file"]:
        return ProcessState("no-pid-file", None)
    if len(words) == 2 and words[0] in ("running", "stopped", "zombie") and words[1].isdecimal():
        return ProcessState(words[0], int(words[1]))
    raise ValueError(f"unexpected process state output: {stdout.strip()!r}")


def remove_files_command(paths) -> str:
    """Remove the launch files a stop leaves behind: prints "removed <path>" or "absent <path>" per path. Exit 1
    (the reason on stderr), removing nothing, when one is a symbolic link or not a regular file."""
    words = " ".join(q(_check_path(p)) for p in paths)
    if not words:
        raise SshTargetInvalid("no files to remove")
    return (f"{_PDCP_FILES}; pdcp_files {words} || exit 1; for f in {words}; do "
            'if [ -e "$f" ]; then rm -f -- "$f" || exit 1; echo "removed $f"; else echo "absent $f"; fi; done')


def tail_command(path: PurePosixPath | str, lines: int = 200) -> str:
    """The last lines of a log; a symbolic link (it could name any file the login user can read) or a
    non-regular file (a FIFO would block) is refused."""
    if int(lines) < 1:
        raise SshTargetInvalid("lines must be at least 1")
    return f"{_PDCP_FILES}; pdcp_files {q(str(path))} || exit 1; tail -n {int(lines)} -- {q(str(path))}"
