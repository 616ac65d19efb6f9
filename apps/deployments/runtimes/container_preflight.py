"""The container runtime's preflight (docs/containers.md, "Preflight"), after the host preflight: on every node that
runs an engine, one SSH command asks the container engine (a) its server version (`docker version --format
'{{.Server.Version}}'`: installed, its daemon reachable by the login user), (b) the image (`image inspect`: present,
its digest the same on every node and the topology's pin when it has one), then starts two trial containers of the
image that run `true` and are removed (`run --rm --pull=never --net=none`): (c) with the node's planned device nodes
(an engine refuses a missing one), (d) with the mounts as `--mount type=bind`, which never creates a missing source
(podman's `-v` refuses one too; docker's `-v`, what the start uses, would create it as an empty directory, so for
docker a missing source is a warning). Each problem names the node and what to do."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from apps.jobs.choices import NodeStepState

from ..topology import ContainerPlan
from . import container_command as cc

if TYPE_CHECKING:
    from ..jobs.deployment_run import DeploymentRun

MARK = "@@"
CHECKS = ("version", "image", "devices", "mounts")
q = shlex.quote


@dataclass
class NodeFindings:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    digest: str = ""


def image_parts(c: ContainerPlan) -> tuple[str, str]:
    """(reference by tag, pinned digest or "") of the plan's image (`<reference>@<digest>` when pinned)."""
    ref, _, pin = c.image.partition("@")
    return ref, pin


def trial_argv(c: ContainerPlan, deployment: str, extra: list[str]) -> list[str]:
    ref, _ = image_parts(c)
    return [c.engine, "run", "--rm", "--pull=never", "--net=none", "--label", f"{cc.LABEL}.preflight={deployment}",
            *extra, ref, "true"]


def node_devices(c: ContainerPlan, keys: list[str]) -> list[str]:
    dies = sorted({die for key in keys for die in c.dies_of(key)})
    return [*(f"/dev/davinci{d}" for d in dies), *cc.MANAGEMENT_DEVICES]


def node_command(c: ContainerPlan, deployment: str, keys: list[str]) -> str:
    """Each check's `@@<name>` line, its output, then `@@rc <status>`; a check runs only when the ones before it
    passed (no image: no trial)."""
    ref, _ = image_parts(c)
    devices = [w for d in node_devices(c, keys) for w in ("--device", d)]
    mounts = [w for m in c.mounts for w in ("--mount", f"type=bind,source={m.host_path},target={m.container_path}"
                                                        + (",readonly" if m.read_only else ""))]
    commands = {"version": f"{q(c.engine)} version --format {q('{{.Server.Version}}')}",
                "image": f"{q(c.engine)} image inspect {q(ref)}",
                "devices": " ".join(q(w) for w in trial_argv(c, deployment, devices)),
                "mounts": " ".join(q(w) for w in trial_argv(c, deployment, mounts))}
    parts = [f'echo {MARK}{name}; {commands[name]} 2>&1; rc=$?; echo "{MARK}rc $rc"' for name in CHECKS]
    # version and image gate what follows; the two trials are independent of each other
    return f'{parts[0]}; [ "$rc" = 0 ] || exit 0; {parts[1]}; [ "$rc" = 0 ] || exit 0; {parts[2]}; {parts[3]}'


def split_checks(stdout: str) -> dict[str, tuple[int, str]]:
    """check name -> (exit status, its output), for the checks that ran."""
    out: dict[str, tuple[int, str]] = {}
    name, lines = None, []
    for line in stdout.splitlines():
        if line.startswith(MARK + "rc ") and name:
            rc = line[len(MARK) + 3:].strip()
            out[name] = (int(rc) if rc.isdecimal() else -1, "\n".join(lines).strip())
            name, lines = None, []
        elif line.startswith(MARK) and line[len(MARK):] in CHECKS:
            name, lines = line[len(MARK):], []
        elif name:
            lines.append(line)
    return out


def image_digest(text: str, ref: str) -> str:
    """The repo digest of `image inspect`'s one image (its Id when the image came from no registry)."""
    data = json.loads(text)
    if not isinstance(data, list) or len(data) != 1 or not isinstance(data[0], dict):
        raise ValueError(f"expected one image in inspect's array, got {text[:200]!r}")
    image = data[0]
    repo = ref.rsplit(":", 1)[0] if ref.rfind(":") > ref.rfind("/") else ref
    digests = [d for d in image.get("RepoDigests") or [] if isinstance(d, str) and "@" in d]
    same_repo = [d for d in digests if d.split("@", 1)[0].endswith(repo.split("/", 1)[-1])]
    for d in same_repo or digests:
        return d.split("@", 1)[1]
    if not isinstance(image.get("Id"), str):
        raise ValueError("the image in inspect's array has no Id")
    return image["Id"]


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(("Run '", "See '"))]
    return (lines[-1] if lines else "no output")[:300]


def node_findings(c: ContainerPlan, node: str, keys: list[str], checks: dict[str, tuple[int, str]]) -> NodeFindings:
    found = NodeFindings()
    ref, pin = image_parts(c)
    engine = c.engine
    rc, text = checks.get("version", (-1, "no answer"))
    if rc != 0:
        found.problems.append(f"`{engine} version` failed on {node} ({last_line(text)}): install {engine} there and "
                              f"let the login user reach its daemon, or set container.engine to the one it has")
        return found
    rc, text = checks.get("image", (-1, "no answer"))
    if rc != 0:
        found.problems.append(f"image {ref} is not on {node} ({last_line(text)}): `{engine} pull {ref}` on {node} "
                              "(the deploy does not pull it)")
        return found
    try:
        found.digest = image_digest(text, ref)
    except ValueError as exc:
        found.problems.append(f"`{engine} image inspect {ref}` on {node} answered what could not be read: {exc}")
    if pin and found.digest and found.digest != pin:
        found.problems.append(f"image {ref} on {node} is {found.digest}, not the pinned {pin}: "
                              f"`{engine} pull {ref}@{pin}` on {node}")
    rc, text = checks.get("devices", (-1, "no answer"))
    if rc != 0:
        found.problems.append(f"a trial container with the device nodes {', '.join(node_devices(c, keys))} did not "
                              f"start on {node} ({last_line(text)}): the planned dies and the Ascend management "
                              f"devices must exist there (check the driver and the dies the topology places)")
    rc, text = checks.get("mounts", (-1, "no answer"))
    if rc != 0 and c.mounts:
        what = (f"a mount's host path is missing on {node} ({last_line(text)}): create it, or ask the admin to "
                "correct the allowlist's mount")
        if engine == "docker":
            found.warnings.append(what + "; docker would create it as an empty directory at start")
        else:
            found.problems.append(what)
    return found


def check_containers(run: DeploymentRun) -> list[str]:
    """The container checks on every engine node: the problems (node-prefixed), the warnings logged."""
    c = run.plan.container
    keys_by_node: dict[str, list[str]] = {}
    for p in run.plan.processes:
        if c.runs(p.key):
            keys_by_node.setdefault(p.node, []).append(p.key)
    if not keys_by_node:
        return []
    pairs = [(node, node_command(c, run.deployment.name, keys)) for node, keys in keys_by_node.items()]
    findings: dict[str, NodeFindings] = {}
    for (node, _), o in zip(pairs, run.fleet.run_many(pairs, timeout=120), strict=True):
        if o.error:
            findings[node] = NodeFindings(problems=[f"cannot run the container checks on {node}: {o.error}"])
        else:
            findings[node] = node_findings(c, node, keys_by_node[node], split_checks(o.result.stdout))
    problems = []
    digests = {node: f.digest for node, f in findings.items() if f.digest}
    if len(set(digests.values())) > 1:
        ref, _ = image_parts(c)
        held = ", ".join(f"{node} {digest}" for node, digest in digests.items())
        problems.append(f"image {ref} is not the same on every node ({held}): pull one digest everywhere and pin "
                        "it as container.digest")
        run.ctx.log(problems[-1], stream="error")
    for node, f in findings.items():
        for w in f.warnings:
            run.ctx.log(w, node=node, stream="stderr")
        for m in f.problems:
            run.ctx.log(m, node=node, stream="error")
        if f.problems:
            run.ctx.node_state(node, NodeStepState.FAILED, "; ".join(f.problems)[:500])
        else:
            run.ctx.log(f"{c.engine}, image {f.digest[:19]}..., device nodes, mounts ok", node=node)
        problems += [f"{node}: {m}" for m in f.problems]
    return problems
