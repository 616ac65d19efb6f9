"""The preflight job: on every node of the plan, check SSH, the binaries on the login PATH, that the planned ports
are free, the free disk for run_dir, that no other local user could reach run_dir (the start would refuse it), the files the profile needs on an engine
node (vllm-cpu: the model's config.json), and, for a profile on NPUs, that the planned NPUs are present, healthy
and not busy. A binary or file the profile knows how to install is named with the command that installs it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from apps.inventory.npu_smi import NpuSmiParseError, npu_smi_parse_info
from apps.jobs.choices import NodeStepState
from apps.jobs.context import JobFailed
from sshexec import probe_commands as remote

from ...choices import ProcessState
from ...topology import LaunchProfile, PlannedProcess, get_profile

if TYPE_CHECKING:
    from ...jobs.deployment_run import DeploymentRun

MIN_FREE_KIB = 1024 * 1024  # 1 GiB for logs


def preflight(run: DeploymentRun, binary_of: Callable[[PlannedProcess], str] | None = None) -> None:
    """binary_of: the program a process needs on its node's login PATH (default its argv[0]; the container runtime
    names the container engine for an engine, whose `vllm` is in the image)."""
    ctx, plan = run.ctx, run.plan
    profile = get_profile(run.spec.launch_profile)
    by_node: dict[str, list[PlannedProcess]] = {}
    for p in plan.processes:
        by_node.setdefault(p.node, []).append(p)
    run.planned_steps(Counter({n: 2 for n in by_node}))
    run.connect(list(by_node))
    own = {r.key: r for r in run.rows.values() if r.state == ProcessState.RUNNING}
    scripts = [(node, node_script(profile, run.spec, procs, binary_of)) for node, procs in by_node.items()]
    problems: list[str] = []
    for (node, script), o in zip(scripts, run.fleet.run_many(scripts, timeout=60), strict=True):
        if o.error:
            mine = [o.error]
        else:
            mine = node_problems(profile, run.spec, node, run.nodes[node].address, by_node[node], own,
                                 o.result.stdout)
        if mine:
            ctx.node_state(node, NodeStepState.FAILED, "; ".join(mine)[:500])
            for m in mine:
                ctx.log(m, node=node, stream="error")
            problems += [f"{node}: {m}" for m in mine]
        else:
            checked = "binaries, ports, disk, run dir" + (", model files" if "@@files" in script else "") + (
                ", NPUs" if "@@npu" in script else "")
            ctx.log(f"{checked} ok", node=node)
            ctx.node_state(node, NodeStepState.DONE, "all checks passed", step_done=True)
    if problems:
        raise JobFailed(f"preflight found {len(problems)} problems: " + "; ".join(problems))
    npus = ", NPUs" if profile.uses_npus else ""
    ctx.summary = f"preflight passed on {len(by_node)} nodes: SSH, host keys, binaries, ports, disk, run dir{npus}"


def node_script(profile: LaunchProfile, spec, procs: list[PlannedProcess],
                binary_of: Callable[[PlannedProcess], str] | None = None) -> str:
    """One node's preflight reads: the binaries its processes run (and curl), ports, disk and run dir; on an engine
    node the files the profile needs (the model's config.json for vllm-cpu) and, for a profile on NPUs, npu-smi."""
    binaries = sorted({binary_of(p) if binary_of else p.launch.argv[0] for p in procs} | {"curl"})
    engines = any(p.role in ("prefill", "decode") for p in procs)
    npu = engines and profile.uses_npus
    if npu:
        binaries.append("npu-smi")
    files = sorted(profile.required_files(spec)) if engines else []
    return remote.preflight_script(binaries=binaries, run_dir=spec.run_dir, npu=npu, files=files)


def node_problems(profile: LaunchProfile, spec, node: str, address: str, procs: list[PlannedProcess], own: dict,
                  stdout: str) -> list[str]:
    """What node_script's answer on `node` says is wrong; `own`: this deployment's running rows by key (their
    ports and NPUs are not someone else's)."""
    mine = []
    sections = remote.split_sections(stdout)
    for line in sections.get("binaries", "").splitlines():
        if line.startswith("missing "):
            binary = line.split(maxsplit=1)[1]
            hint = profile.install_hints.get(binary)
            mine.append(f"`{binary}` is missing on {node}: {hint}" if hint else f"`{binary}` is not on the login PATH")
    required = profile.required_files(spec)
    for line in sections.get("files", "").splitlines():
        if line.startswith("missing "):
            path = line.split(maxsplit=1)[1]
            mine.append(f"`{path}` is missing on {node}: {required.get(path, 'the engines need it')}")
    listening = remote.listening_ports(sections.get("ports", ""), address)
    if sections.get("ports", "").strip() == "ss-missing":
        mine.append("`ss` is missing: cannot check ports")
    for p in procs:
        wanted = set(p.ports)
        if p.kv_port_window:
            wanted |= set(range(p.kv_port_window[0], p.kv_port_window[1] + 1))
        busy = sorted(wanted & listening)
        if busy and p.key not in own:
            mine.append(f"ports {busy} of {p.key} are already in use on {address}")
    df = sections.get("disk", "").split()
    if len(df) >= 4 and df[3].isdecimal():
        if int(df[3]) < MIN_FREE_KIB:
            mine.append(f"only {int(df[3]) // 1024} MiB free for {spec.run_dir} (need 1024 MiB)")
    else:
        mine.append(f"cannot read free disk space for {spec.run_dir}: {' '.join(df) or 'no output'}")
    rundir = sections.get("rundir", "").strip()
    if remote.RUN_DIR_OK not in rundir.splitlines():
        mine.append(f"run_dir {spec.run_dir} would be refused: {rundir or 'no answer'}")
    if "npu" in sections:
        mine += _npu_problems(sections["npu"], procs, own)
    return mine


def _npu_problems(text, procs, own) -> list[str]:
    try:
        info = npu_smi_parse_info(text)
    except NpuSmiParseError as exc:
        return [f"cannot read `npu-smi info`: {exc}"]
    out = []
    own_pids = {r.pid for r in own.values() if r.pid}
    by_logical = {d.logical_id: d for d in info.dies}
    chip_to_logical = {(d.npu_id, d.chip_id): d.logical_id for d in info.dies}
    users: dict[int, list] = {}
    for proc in info.processes:
        users.setdefault(chip_to_logical.get((proc.npu_id, proc.chip_id), -1), []).append(proc)
    for p in procs:
        devices = p.launch.env.get("ASCEND_RT_VISIBLE_DEVICES", "")
        devices = devices if isinstance(devices, str) else ""  # an EnvExtend names no devices of its own
        for d in (int(x) for x in devices.split(",") if x.strip().isdecimal()):
            die = by_logical.get(d)
            if die is None:
                out.append(f"{p.key}: NPU {d} is not present")
                continue
            if die.health.strip().upper() != "OK":
                out.append(f"{p.key}: NPU {d} health is {die.health}")
            others = [u for u in users.get(d, []) if u.pid not in own_pids]
            if others:
                u = others[0]
                out.append(f"{p.key}: NPU {d} is busy (pid {u.pid} {u.name}, {u.memory_mb} MB)")
    return out
