"""What really runs on the simulated nodes of a deployment, read from /proc (the sim nodes share this machine's
disk and process table), to hold the Process rows against: the truth the refresh job must read back."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from sshexec.process_commands import process_marker
from tests.deployments.simdeploy import pid_alive, pids_in


def running_on_nodes(run_dir: str) -> dict[str, int]:
    """key -> pid of every pid file whose process is alive."""
    return {key: pid for key, pid in pids_in(run_dir).items() if pid_alive(pid)}


def rows_against_nodes(deployment, run_dir: str) -> list[str]:
    """Every way the rows differ from the nodes (empty when they match): a running row must name the live pid of
    its pid file, any other row a process that does not run, and every live pid file must have a running row."""
    from apps.deployments.models import Process

    truth = running_on_nodes(run_dir)
    rows = {r.key: r for r in Process.objects.filter(deployment=deployment)}
    wrong = []
    for key, row in rows.items():
        if row.state == "running" and truth.get(key) != row.pid:
            wrong.append(f"{key}: row running pid {row.pid}, node {truth.get(key) or 'not running'}")
        elif row.state != "running" and key in truth:
            wrong.append(f"{key}: row {row.state}, node running pid {truth[key]}")
    wrong += [f"{key}: runs as pid {pid} with no running row" for key, pid in truth.items() if key not in rows]
    return sorted(wrong)


def instances_per_process(deployment) -> Counter:
    """key -> how many process trees carry its start marker (PDCP_PROCESS): one each, or it was started twice."""
    from apps.deployments.models import Process

    markers = {process_marker(r.pid_file): r.key for r in Process.objects.filter(deployment=deployment)}
    env_of = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            env = dict(v.split("=", 1) for v in (proc / "environ").read_bytes().decode(errors="replace").split("\0")
                       if "=" in v)
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if env.get("PDCP_PROCESS") in markers and pid_alive(int(proc.name)):
            env_of[int(proc.name)] = (env["PDCP_PROCESS"], ppid)
    roots = Counter({key: 0 for key in markers.values()})
    for marker, ppid in env_of.values():
        if env_of.get(ppid, (None,))[0] != marker:  # the top of its tree: its parent is not the same process
            roots[markers[marker]] += 1
    return roots

