"""`up`, `down`, `status`: bring the whole simulated cluster up on one machine and take it down by PID.

state.json in the state dir records every PID `up` started; `down` stops those, every simulated MindIE pod
recorded below `kube/` (simcluster/mindie/kube.py), every engine registered in a node dir, every process whose pid file lies in a node dir and belongs to the login
user (what the control plane starts over SSH), and the SSH sessions still attached to each sshd.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import yaml

from simcluster import nodestate, procs, rundirs, runtime, shims
from simcluster.hccn_plan import hccn_plan
from simcluster.mindie import kube
from simcluster.mindie import publish as mindie_publish
from simcluster.spec import CONTAINER_ALLOWLIST, HARDWARE, node_containers, node_versions
from simcluster.sshnode import (
    LOGIN_USER,
    RunningSshNode,
    ensure_login_user,
    generate_client_key,
    pid_alive,
    start_ssh_node,
)

DEFAULT_STATE_DIR = Path("/var/lib/pdcp-sim/state")  # below root-owned 0755 dirs: see runtime.py


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.3):
            return True
    except OSError:
        return False


def load_state(state_dir: Path) -> dict:
    return nodestate.read_json(state_dir / "state.json")


def _services(spec: dict, state_dir: Path, pids: dict) -> dict:
    svc = spec.get("services") or {}
    host = svc.get("host")
    if not host:
        return {}
    out = {"host": host}
    memcached = []
    for port in svc.get("memcached_ports", []):
        pidfile = state_dir / f"memcached-{port}.pid"
        pidfile.unlink(missing_ok=True)
        procs.spawn(["memcached", "-d", "-l", host, "-p", str(port), "-U", "0", "-m", "64", "-u", "root",
                     "-P", str(pidfile)], state_dir / f"memcached-{port}.log")
        procs.wait_for(lambda p=pidfile: p.exists() and p.read_text().strip(), 5, f"memcached {port}")
        pids[f"memcached:{port}"] = int(pidfile.read_text())
        memcached.append(f"{host}:{port}")
    out["ascendstore"] = memcached
    if svc.get("mooncake_rpc_port"):
        rpc, metrics = svc["mooncake_rpc_port"], svc.get("mooncake_metrics_port", 9003)
        env = shims.python_env()
        pids["mooncake_master"] = procs.spawn(
            [sys.executable, str(Path(sys.executable).parent / "mooncake_master"), f"-rpc_address={host}",
             f"-rpc_port={rpc}", f"-metrics_host={host}", f"-metrics_port={metrics}",
             "-default_kv_lease_ttl=5000", "-client_ttl=10", "-logtostderr=true"],
            state_dir / "mooncake_master.log", env)
        # Engines join it themselves: an AscendStoreConnector with the mooncake backend starts its own store
        # client for the master its mooncake.json names (simcluster/kvpool.py).
        procs.wait_for(lambda: _port_open(host, metrics), 15, "mooncake_master")
        out["mooncake_master"] = f"{host}:{rpc}"
        out["mooncake_metrics"] = f"http://{host}:{metrics}/metrics"
    return out


def _still_running(state: dict) -> list[str]:
    """Components of a recorded state whose PID still runs the process `up` started (a reused PID does not count)."""
    starts = state.get("pid_starts", {})
    return [key for key, pid in state.get("pids", {}).items()
            if pid_alive(pid) and (key not in starts or procs.start_time(pid) == starts[key])]


def up(spec: dict, state_dir: Path = DEFAULT_STATE_DIR) -> dict:
    state_dir = Path(state_dir).resolve()
    running = _still_running(load_state(state_dir))
    if running:
        raise SystemExit(f"simcluster already running in {state_dir} ({', '.join(running)}): run `down` first")
    t0 = time.monotonic()
    state_dir.mkdir(parents=True, exist_ok=True)
    state_dir.chmod(0o755)
    ensure_login_user()
    key_path = state_dir / "id_ed25519"
    _private, public = generate_client_key(key_path)
    pids: dict[str, int] = {}
    state = {"spec": spec, "pids": pids, "pid_starts": {}, "nodes": {}, "started": time.time()}
    try:
        bin_dir = shims.write_shims(state_dir / "bin", runtime.publish())
        mindie_publish.publish_scripts()
        _login_user_dir(kube.kube_root(state_dir))
        services = _services(spec, state_dir, pids)
        for position, n in enumerate(spec["nodes"]):
            ndir = state_dir / "nodes" / n["name"]
            (ndir / "engines").mkdir(parents=True, exist_ok=True)
            nodestate.write_json(ndir / "node.json", {
                "name": n["name"], "address": n["address"], "hardware": n["hardware"], "role": n.get("role", ""),
                **node_containers(spec, n), **node_npu_setup(spec, n, position)})
            node = start_ssh_node(n["name"], n["address"], n["ssh_port"], ndir, public, bin_dir=bin_dir)
            (ndir / "engines").chmod(0o777)
            pids[f"sshd:{n['name']}"] = node.pid
            state["nodes"][n["name"]] = {"dir": str(ndir), "address": n["address"], "port": n["ssh_port"],
                                         "host_key": node.host_key_line, "config": str(node.config_path)}
        state["services"] = services
        state["runs_dir"] = str(rundirs.private_run_root())
        inventory = write_inventory(spec, state, key_path, state_dir / "inventory.yaml")
        state["inventory"] = str(inventory)
    except BaseException:
        # A failed `up` leaves nothing running behind it, so the next `up` can simply try again.
        _record_starts(state)
        nodestate.write_json(state_dir / "state.json", state)
        down(state_dir)
        nodestate.write_json(state_dir / "state.json", {"spec": spec, "pids": {}, "failed": time.time()})
        raise
    _record_starts(state)
    nodestate.write_json(state_dir / "state.json", state)
    state["seconds"] = round(time.monotonic() - t0, 2)
    return state


def node_npu_setup(spec: dict, node: dict, position: int) -> dict:
    """What node.json carries for npu-smi and hccn_tool: software versions and the NPU address plan."""
    dies = HARDWARE[node.get("hardware", "")][2]
    if not dies:
        return {}
    return {"versions": node_versions(spec, node),
            "hccn": hccn_plan(position, dies, vnic=node["hardware"] == "A3")}


def _login_uid() -> int:
    import pwd

    return pwd.getpwnam(LOGIN_USER).pw_uid


def _login_user_dir(path: Path) -> None:
    """A directory the login user writes (the simulated Kubernetes' state, simcluster/mindie/kube.py)."""
    import pwd

    pw = pwd.getpwnam(LOGIN_USER)
    path.mkdir(exist_ok=True)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    path.chmod(0o755)


def _record_starts(state: dict) -> None:
    state["pid_starts"] = {key: procs.start_time(pid) for key, pid in state["pids"].items()}


def cluster_allowlist() -> dict:
    """What a topology on the simulated cluster may name (docs/cluster-allowlist.md): MindIE's image, weights and
    scripts (simcluster/mindie/publish.py), and the container image and mounts (spec.CONTAINER_ALLOWLIST), so the
    reference topology deploys as containers too."""
    allowlist = mindie_publish.cluster_allowlist()
    allowlist["images"] = [*allowlist["images"], *CONTAINER_ALLOWLIST["images"]]
    allowlist["mounts"] = [dict(m) for m in CONTAINER_ALLOWLIST["mounts"]]
    return allowlist


def write_inventory(spec: dict, state: dict, key_path: Path, path: Path) -> Path:
    """docs/contracts.md §1, exactly."""
    nodes = []
    for n in spec["nodes"]:
        hardware_model, npu_model, count = HARDWARE[n["hardware"]]
        nodes.append({"name": n["name"], "address": n["address"], "ssh_port": n["ssh_port"], "ssh_user": LOGIN_USER,
                      "credential": "simcluster", "host_key": state["nodes"][n["name"]]["host_key"],
                      "hardware_model": hardware_model, "npu_model": npu_model, "npu_count": count,
                      "labels": dict(n.get("labels") or {})})
    doc = {"version": 1,
           "credentials": [{"name": "simcluster", "username": LOGIN_USER, "private_key_file": str(key_path)}],
           "clusters": [{"name": spec["name"], "description": spec.get("description", ""),
                         "allowlist": cluster_allowlist(), "nodes": nodes}]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _session_procs(sshd_pid: int) -> list[int]:
    return procs.children_of(sshd_pid)


def node_processes(ndir: Path) -> list[int]:
    """Engines registered on the node, login-user processes named by pid files below the node dir, and every
    process started over SSH on this node wherever it keeps its files (sshd gives each session
    SIMCLUSTER_NODE_DIR, and the processes a session starts inherit it)."""
    import pwd

    uid = pwd.getpwnam(LOGIN_USER).pw_uid
    found = {int(e["pid"]) for e in nodestate.running_engines(ndir)}
    found |= _processes_with_env("SIMCLUSTER_NODE_DIR", str(ndir), uid)
    for pidfile in ndir.rglob("*.pid"):
        if pidfile.name == "sshd.pid":
            continue
        try:
            pid = int(pidfile.read_text().split()[0])
        except (ValueError, IndexError, OSError):
            continue
        if pid_alive(pid) and procs.uid_of(pid) == uid:
            found.add(pid)
    return sorted(found)


def _environ(proc: Path) -> list[bytes]:
    """A process inside execve reads as an empty environ for a moment (docs/ssh-execution.md): look again."""
    for wait in (0, 0.02, 0.05, 0.1, 0.2):
        time.sleep(wait)
        data = (proc / "environ").read_bytes()
        if data:
            break
    return data.split(b"\0")


def _processes_with_env(name: str, value: str, uid: int) -> set[int]:
    marker = f"{name}={value}".encode()
    found = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if proc.stat().st_uid != uid:
                continue
            environ = _environ(proc)
        except OSError:
            continue
        if marker in environ and pid_alive(int(proc.name)):
            found.add(int(proc.name))
    return found


def down(state_dir: Path = DEFAULT_STATE_DIR) -> list[str]:
    state_dir = Path(state_dir).resolve()
    state = load_state(state_dir)
    stopped = []
    for namespace, pod, pid in kube.running_pod_pids(state_dir, _login_uid()):  # the simulated MindIE's pods
        if procs.stop_pid(pid):
            stopped.append(f"pod:{namespace}/{pod}:{pid}")
    for name, info in state.get("nodes", {}).items():
        for pid in node_processes(Path(info["dir"])):
            if procs.stop_pid(pid):
                stopped.append(f"{name}:process:{pid}")
    starts = state.get("pid_starts", {})
    for key, pid in state.get("pids", {}).items():
        if key in starts and procs.start_time(pid) != starts[key]:
            continue  # that PID now belongs to another process
        if key.startswith("sshd:"):
            for child in _session_procs(pid):
                procs.stop_pid(child, timeout=2)
        if procs.stop_pid(pid):
            stopped.append(f"{key}:{pid}")
    return stopped


def status(state_dir: Path = DEFAULT_STATE_DIR) -> dict:
    state = load_state(Path(state_dir).resolve())
    report = {"components": {k: {"pid": p, "alive": pid_alive(p)} for k, p in state.get("pids", {}).items()},
              "engines": {}}
    for name, info in state.get("nodes", {}).items():
        report["engines"][name] = [{"pid": e["pid"], "api": e.get("api"), "role": e.get("role"),
                                    "devices": e.get("devices")} for e in nodestate.running_engines(Path(info["dir"]))]
    report["inventory"] = state.get("inventory")
    report["services"] = state.get("services", {})
    return report


def restart_sshd(state_dir: Path, node_name: str) -> RunningSshNode:
    """Bring a cut node's SSH back with the same host key and config."""
    state = load_state(Path(state_dir).resolve())
    spec_node = next(n for n in state["spec"]["nodes"] if n["name"] == node_name)
    info = state["nodes"][node_name]
    public = (Path(state_dir).resolve() / "id_ed25519.pub").read_text().split()
    node = start_ssh_node(node_name, spec_node["address"], spec_node["ssh_port"], Path(info["dir"]),
                          f"{public[0]} {public[1]}", bin_dir=Path(state_dir).resolve() / "bin")
    state["pids"][f"sshd:{node_name}"] = node.pid
    state.setdefault("pid_starts", {})[f"sshd:{node_name}"] = procs.start_time(node.pid)  # else `down` skips it
    nodestate.write_json(Path(state_dir).resolve() / "state.json", state)
    return node


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                for c in (task / "children").read_text().split()]
    except OSError:
        return []


def _descendants(pid: int) -> list[int]:
    out = []
    for child in _children(pid):
        out += [child, *_descendants(child)]
    return out


def _is_sshd(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().startswith("sshd")
    except OSError:
        return False


def _signal(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _listener(state_dir: Path, node_name: str) -> int:
    return load_state(Path(state_dir).resolve())["pids"][f"sshd:{node_name}"]


def freeze_ssh(state_dir: Path, node_name: str) -> list[int]:
    """Freeze (SIGSTOP) a node's sshd listener and per-connection sshd processes, as a network partition would:
    nothing more gets through its connections, while the commands its sessions already run go on. Only cut_ssh
    ends a freeze."""
    import signal

    listener = _listener(state_dir, node_name)
    sshd = [listener, *(p for p in _descendants(listener) if _is_sshd(p))]
    _signal(sshd, signal.SIGSTOP)
    return sshd


def cut_ssh(state_dir: Path, node_name: str) -> list[int]:
    """Sever a node's SSH: freeze, then kill, its sshd listener and per-connection sshd processes, so its TCP
    connections drop at once with no output still in them getting through; the commands the sessions ran, and what
    those started, go on. Returns the killed PIDs; restart_sshd brings the node back."""
    import signal

    listener = _listener(state_dir, node_name)
    _signal([listener], signal.SIGSTOP)
    below = _descendants(listener)
    sshd = [listener, *(p for p in below if _is_sshd(p))]
    _signal(sshd, signal.SIGSTOP)
    _signal(sshd, signal.SIGKILL)
    # A session's child that became its shell just as a freeze stopped it would stay stopped: let it go on.
    _signal([p for p in below if p not in sshd], signal.SIGCONT)
    for pid in sshd:
        procs.wait_for(lambda p=pid: not pid_alive(p), 5, f"sshd {pid} of {node_name} to die")
    return sshd
