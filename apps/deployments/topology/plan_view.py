"""The plan as the docs write a launch (docs/ascend-pd-launch-facts.md): per process its files, its environment as
`export` lines, then the program with one flag per line and JSON configs pretty-printed; the exact line a deploy
sends (run-dir checks, pid file, log, setsid) rides along for a fold-out.

Every text here is valid sh: run on the node, it writes the same files, sets the same environment (an EnvExtend
keeps the node's value as sshexec's start does: a separator only next to a non-empty part) and runs the same argv,
except that a JSON object or array argument is re-indented (the same JSON value, other whitespace). Pure: no Django.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from sshexec import EnvExtend, LaunchFile, detached_start_command

if TYPE_CHECKING:
    from .plan import Plan, PlannedProcess

q = shlex.quote
INDENT = "  "  # flags under the program, as the docs indent them
_FLAG = re.compile(r"^--?[A-Za-z]")  # "-l", "--port", "--enable_offload=false"; not "-1" nor "-"
_FLAG_EQ = re.compile(r"^--?[A-Za-z][A-Za-z0-9_.-]*=")
_PYTHON = re.compile(r"^(.*/)?python[0-9.]*$")


@dataclass(frozen=True)
class FileView:
    path: str
    mode: str  # octal, as chmod takes it: "600"
    content: str
    lines: tuple[str, ...]  # sh that writes it: a quoted here-document (or printf), then chmod

    def as_dict(self) -> dict:
        return {"path": self.path, "mode": self.mode, "content": self.content, "lines": list(self.lines)}


@dataclass(frozen=True)
class ProcessView:
    key: str
    role: str
    instance: str | None
    node: str
    address: str
    ports: tuple[int, ...]
    kv_port_window: tuple[int, int] | None
    health_url: str | None
    workdir: str
    log_file: str  # as the start resolves it (absolute)
    pid_file: str
    files: tuple[FileView, ...]
    exports: tuple[str, ...]  # "export NAME=value", in the plan's order
    command: tuple[str, ...]  # the program, then one flag (with its values) per entry; all but the last end in " \"
    start_line: str  # exactly what a deploy runs on the node (sshexec.detached_start_command, or a `docker run`)
    in_container: bool = False  # started as a container (runtime: container), not as a host process

    @property
    def text(self) -> str:
        """The docs form as one block: files, a blank line, exports and the command."""
        head = "\n".join(line for f in self.files for line in f.lines)
        body = "\n".join((*self.exports, *self.command))
        return f"{head}\n\n{body}" if head else body

    def as_dict(self) -> dict:
        return {"key": self.key, "role": self.role, "instance": self.instance, "node": self.node,
                "address": self.address, "ports": list(self.ports),
                "kv_port_window": list(self.kv_port_window) if self.kv_port_window else None,
                "health_url": self.health_url, "workdir": self.workdir, "log_file": self.log_file,
                "pid_file": self.pid_file, "files": [f.as_dict() for f in self.files],
                "exports": list(self.exports), "command": list(self.command), "text": self.text,
                "start_line": self.start_line, "in_container": self.in_container}


@dataclass(frozen=True)
class NodeView:
    node: str
    address: str
    processes: tuple[ProcessView, ...]


@dataclass(frozen=True)
class StageView:
    number: int
    name: str
    nodes: tuple[NodeView, ...]

    @property
    def processes(self) -> tuple[ProcessView, ...]:
        return tuple(p for n in self.nodes for p in n.processes)


def plan_view(plan: Plan, start_lines: Mapping[str, str] | None = None) -> tuple[StageView, ...]:
    """Stages in order; in each, the nodes in the order their first process appears, each with its processes.
    `start_lines` replaces the host start line of the processes a runtime starts otherwise (a container's
    `docker run`, runtimes/container_command.plan_start_lines)."""
    stages = []
    for number, stage in enumerate(plan.stages, 1):
        nodes = []
        for node in dict.fromkeys(p.node for p in stage.processes):
            procs = tuple(process_view(p, (start_lines or {}).get(p.key)) for p in stage.processes if p.node == node)
            nodes.append(NodeView(node, procs[0].address, procs))
        stages.append(StageView(number, stage.name, tuple(nodes)))
    return tuple(stages)


def process_view(p: PlannedProcess, start_line: str | None = None) -> ProcessView:
    launch = p.launch
    return ProcessView(
        key=p.key, role=p.role, instance=p.instance, node=p.node, address=p.address, ports=tuple(p.ports),
        kv_port_window=tuple(p.kv_port_window) if p.kv_port_window else None, health_url=p.health_url,
        workdir=str(launch.workdir), log_file=str(launch.log_path), pid_file=str(launch.pid_path),
        files=tuple(file_view(f) for f in _unique_files(launch.files)), exports=tuple(export_lines(launch.env)),
        command=tuple(command_lines(launch.argv)), start_line=start_line or detached_start_command(launch),
        in_container=start_line is not None)


def _unique_files(files: Sequence[LaunchFile]) -> list[LaunchFile]:
    return list({str(f.path): f for f in files}.values())  # a file named twice is written once (sshexec does too)


# --- environment ---------------------------------------------------------------------------------------------------

def export_lines(env: Mapping[str, str | EnvExtend]) -> list[str]:
    return [f"export {name}={env_word(name, value)}" for name, value in env.items()]


def env_word(name: str, value: str | EnvExtend) -> str:
    """The value as one sh word. An EnvExtend reads the node's own $name inside double quotes (never split nor
    evaluated) and puts a separator only next to a non-empty part: /x/mooncake"${NAME:+:$NAME}"."""
    if not isinstance(value, EnvExtend):
        return q(value)
    sep = value.separator
    if value.prepend:
        word = q(value.prepend) + f'"${{{name}:+{sep}${name}}}"'
        return word + q(sep + value.append) if value.append else word
    return f'"${{{name}:+${name}{sep}}}"' + q(value.append)


# --- the program and its flags -------------------------------------------------------------------------------------

def command_lines(argv: Sequence[str]) -> list[str]:
    """The program (with `-m module` / `-c code` of a Python interpreter) on the first line, then each flag with the
    values that follow it on a line of its own, indented; ` \\` continues every line but the last. After a bare
    `--` everything is one line (they are operands)."""
    words = list(argv)
    head = 1
    if _PYTHON.match(PurePosixPath(words[0]).name) and len(words) > 2 and words[1] in ("-m", "-c"):
        head = 3
    while head < len(words) and not _starts_line(words[head]):
        head += 1
    groups = [words[:head]]
    rest = words[head:]
    while rest:
        if rest[0] == "--":
            groups.append(rest)
            break
        n = 1
        while n < len(rest) and not _starts_line(rest[n]):
            n += 1
        groups.append(rest[:n])
        rest = rest[n:]
    lines = [" ".join(_word(w, "") for w in groups[0])]
    lines += [INDENT + " ".join(_word(w, INDENT) for w in g) for g in groups[1:]]
    return [line + " \\" for line in lines[:-1]] + lines[-1:]


def _starts_line(word: str) -> bool:
    return word == "--" or bool(_FLAG.match(word))


def _word(word: str, indent: str) -> str:
    """One sh word; a JSON argument (or the value of --flag=JSON) pretty-printed, its lines after the first indented
    with the flag so the closing bracket lines up under it, as the docs write it."""
    flag, eq, value = word.partition("=") if _FLAG_EQ.match(word) else ("", "", word)
    pretty = pretty_json(value)
    if pretty is None:
        return q(word)
    return (q(flag + eq) if eq else "") + q(pretty.replace("\n", "\n" + indent))


def pretty_json(word: str) -> str | None:
    """A JSON object or array argument indented by 2, or None when the word is no such JSON or re-indenting could
    change what a reader gets (a repeated key; NaN or Infinity, which are no JSON)."""
    if not word.lstrip().startswith(("{", "[")):
        return None
    try:
        value = json.loads(word, object_pairs_hook=_no_repeated_keys, parse_constant=_no_constant)
    except (ValueError, _Unsure):
        return None
    if not value:
        return None  # {} and [] are as short as they get
    pretty = json.dumps(value, indent=2, ensure_ascii=False)
    if json.loads(pretty) != value:
        return None
    return pretty


class _Unsure(Exception):
    pass


def _no_repeated_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise _Unsure(keys)
    return dict(pairs)


def _no_constant(name):
    raise _Unsure(name)


# --- files ---------------------------------------------------------------------------------------------------------

def file_view(f: LaunchFile) -> FileView:
    path, mode = str(f.path), f"{f.mode:o}"
    return FileView(path, mode, f.content, tuple(file_lines(path, f.content, mode)))


def file_lines(path: str, content: str, mode: str) -> list[str]:
    """`cat > path <<'EOF'` with the content verbatim (the delimiter is one no line of it equals); content that does
    not end in a newline is written with printf, which adds none. Then chmod."""
    lines = content.split("\n")
    if content.endswith("\n"):
        delimiter, n = "EOF", 0
        while delimiter in lines:
            n += 1
            delimiter = f"EOF{n}"
        write = [f"cat > {q(path)} <<'{delimiter}'", *lines[:-1], delimiter]
    else:
        write = [f"printf %s {q(content)} > {q(path)}"]
    return [*write, f"chmod {mode} {q(path)}"]
