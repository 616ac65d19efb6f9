"""The command lines of the container runtime (container.py): `docker run` (or `podman run`) of one planned engine as
vllm-ascend's PD guide starts its image (docs/container-launch-facts.md §1.3; flag by flag in docs/containers.md),
and the stop, inspect and logs lines that find it again by its name. Every argv is a list; a shell line is only
ever those words each through shlex.quote, never text a topology wrote."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from sshexec import EnvExtend
from sshexec import probe_commands as remote

from ..topology import ContainerPlan, PlannedProcess

# The three management devices every line of the guides hands the container next to its davinci dies.
MANAGEMENT_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
# Inside a container the runtime numbers the dies it was given from 0, so the host's logical ids would name dies it
# does not have; its device list is what limits it (vllm-project/vllm-ascend#12959: leave it unset in a container).
HOST_ONLY_ENV = ("ASCEND_RT_VISIBLE_DEVICES",)
LABEL = "pdcp"
_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,253}\Z")  # docker's container name rule
_GONE = re.compile(r"no such (object|container)", re.I)  # docs/container-launch-facts.md §3.1
MARK = "@@"
q = shlex.quote


def container_name(deployment: str, key: str) -> str:
    """pdcp-<deployment>-<process key>: one per deployment and process on a node (deployment names are unique)."""
    name = f"{LABEL}-{deployment}-{key}"
    if not _NAME_RE.match(name):
        raise ValueError(f"{name!r} is not a valid container name (letters, digits, '_', '.', '-')")
    return name


def launch_dirs(p: PlannedProcess) -> list[str]:
    """The directories of the launch files the process reads (mooncake.json...): bound at the same path, read-only."""
    return sorted({str(PurePosixPath(f.path).parent) for f in p.launch.files})


def run_argv(c: ContainerPlan, p: PlannedProcess, *, deployment: str, revision: int | None) -> list[str]:
    """`docker run -d` of the process's own argv in the image. revision None leaves its label out (the fingerprint:
    a new revision that runs the same line keeps the container, as the host runtime keeps a process)."""
    argv = [c.engine, "run", "-d", "--name", container_name(deployment, p.key),
            "--label", f"{LABEL}.deployment={deployment}", "--label", f"{LABEL}.process={p.key}"]
    if revision is not None:
        argv += ["--label", f"{LABEL}.revision={revision}"]
    argv += ["--net=host", f"--shm-size={c.shm_size}"]
    for die in c.dies_of(p.key):
        argv += ["--device", f"/dev/davinci{die}"]
    for device in MANAGEMENT_DEVICES:
        argv += ["--device", device]
    for mount in c.mounts:
        argv += ["-v", mount.volume]
    for directory in launch_dirs(p):
        argv += ["-v", f"{directory}:{directory}:ro"]
    for name, value in sorted(p.launch.env.items()):
        if name in HOST_ONLY_ENV:
            continue
        if isinstance(value, EnvExtend):  # container_rules refuses these: -e cannot keep the node's value
            raise ValueError(f"{p.key}: {name} extends the node's value, which a container does not have")
        argv += ["-e", f"{name}={value}"]
    return [*argv, c.image, *p.launch.argv]


def start_command(c: ContainerPlan, p: PlannedProcess, *, deployment: str, revision: int | None) -> str:
    """Removes a stopped container left under the name (a running one is not removed, and the run then fails on the
    name), runs the new one, then prints its id and its main process's pid."""
    engine, name = q(c.engine), q(container_name(deployment, p.key))
    run = " ".join(q(a) for a in run_argv(c, p, deployment=deployment, revision=revision))
    return f"{engine} rm {name} >/dev/null 2>&1; {run} && {engine} inspect --format '{{{{.State.Pid}}}}' {name}"


def plan_start_lines(plan, *, deployment: str, revision: int | None) -> dict[str, str]:
    """For the plan page and API: each container's exact `docker run` line by process key (the host processes of a
    container plan, and every process of another plan, keep the host start line topology/plan_view.py gives)."""
    c = plan.container
    if c is None:
        return {}
    return {p.key: start_command(c, p, deployment=deployment, revision=revision) for p in plan.processes
            if c.runs(p.key)}


@dataclass(frozen=True)
class Started:
    container_id: str
    pid: int | None


def parse_started(stdout: str) -> Started:
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines or not re.fullmatch(r"[0-9a-f]{12,64}", lines[0]):
        raise ValueError(f"expected the new container's id, got {stdout.strip()[:200]!r}")
    pid = int(lines[-1]) if len(lines) > 1 and lines[-1].isdecimal() else None
    return Started(lines[0], pid or None)


def stop_command(engine: str, name: str, grace_seconds: int) -> str:
    """`stop -t <grace>`, then `rm`. Prints `stopped <name>`, or `absent <name>` when there is no such container."""
    e, n = q(engine), q(name)
    gone = f'case "$o" in *[Nn]"o such container"*) echo "absent "{n}; exit 0;; esac'
    return (f"o=$({e} stop -t {int(grace_seconds)} {n} 2>&1) || {{ {gone}; echo \"$o\" >&2; exit 1; }}; "
            f"o=$({e} rm {n} 2>&1) || {{ {gone}; echo \"$o\" >&2; exit 1; }}; echo \"stopped \"{n}")


def logs_command(engine: str, name: str, lines: int) -> str:
    return f"{q(engine)} logs --tail {int(lines)} {q(name)} 2>&1"


def inspect_command(engine: str, names: list[str], health: dict[str, str | None]) -> str:
    """`inspect` of every name at once (the JSON array on stdout, a missing one's error on stderr), then its exit
    status, then `@@health <name> <status>` of each probe given (health: name -> URL, None for no probe)."""
    e = q(engine)
    parts = [f"{e} inspect {' '.join(q(n) for n in names)}", f'echo "{MARK}inspect $?"']
    for name, url in health.items():
        if url:
            parts.append(f"{remote.health_probe_command(url)} >/dev/null 2>&1; echo {q(MARK + 'health ' + name)} $?")
    return "; ".join(parts)


@dataclass(frozen=True)
class ContainerState:
    status: str  # docker: created running paused restarting removing exited dead; podman adds stopped, ... ;
    pid: int | None  # or "no-container"
    exit_code: int | None

    @property
    def text(self) -> str:
        """What the jobs log as the process's state: running, or why it is not."""
        if self.status in ("running", "no-container") or self.exit_code is None:
            return self.status
        return f"{self.status} (exit code {self.exit_code})"


NO_CONTAINER = ContainerState("no-container", None, None)


def parse_inspect(stdout: str, names: list[str], stderr: str = "") -> tuple[dict[str, ContainerState],
                                                                          dict[str, bool]]:
    """(state by name, healthy by name) from inspect_command's output. A name inspect did not find, and said so on
    stderr (docker: `Error: No such object: <name>`; podman: `no such object`), is no-container. ValueError naming
    what is wrong for anything else: output that is not inspect's JSON array of containers, or a failed inspect
    (the daemon down, no permission) that does not say the container is gone."""
    text, _, tail = stdout.partition(f"{MARK}inspect ")
    status_word, _, probes = tail.partition("\n")
    status_word = status_word.strip()
    if not status_word.isdecimal():
        raise ValueError(f"no inspect exit status in the output: {stdout.strip()[-200:]!r}")
    text = text.strip()
    found: dict[str, ContainerState] = {}
    if text:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"inspect did not print JSON ({exc}): {text[:200]!r}") from None
        if not isinstance(data, list):
            raise ValueError(f"inspect printed {type(data).__name__}, not a JSON array: {text[:200]!r}")
        for entry in data:
            name, state = _entry(entry)
            found[name] = state
    elif status_word == "0":
        raise ValueError("inspect printed nothing and exited 0")
    unknown = sorted(set(found) - set(names))
    if unknown:
        raise ValueError(f"inspect answered for containers not asked about: {', '.join(unknown)}")
    if status_word != "0":
        said_gone = [line for line in stderr.splitlines() if _GONE.search(line)]
        unexplained = [n for n in names if n not in found and not any(n in line for line in said_gone)]
        if unexplained:
            raise ValueError(f"inspect exited {status_word} without saying {', '.join(unexplained)} is gone: "
                             f"{stderr.strip()[-300:] or '(nothing on stderr)'}")
    healthy = {}
    for line in probes.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == f"{MARK}health":
            healthy[words[1]] = words[2] == "0"
    return {n: found.get(n, NO_CONTAINER) for n in names}, healthy


def _entry(entry) -> tuple[str, ContainerState]:
    """One container of inspect's array: Name (docker writes it with a leading '/'), State.Status, .Pid, .ExitCode."""
    if not isinstance(entry, dict):
        raise ValueError(f"expected a container object in inspect's array, got {str(entry)[:100]!r}")
    name = entry.get("Name")
    state = entry.get("State")
    if not isinstance(name, str) or not name:
        raise ValueError("a container in inspect's array has no Name")
    name = name.removeprefix("/")
    if not isinstance(state, dict):
        raise ValueError(f"container {name} has no State object in inspect's output")
    status, pid, code = state.get("Status"), state.get("Pid"), state.get("ExitCode")
    if not isinstance(status, str) or not status:
        raise ValueError(f"container {name}: State.Status missing or not a string")
    for field, value in (("Pid", pid), ("ExitCode", code)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"container {name}: State.{field} missing or not an integer")
    return name, ContainerState(status, pid or None, code)
