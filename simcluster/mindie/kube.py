"""The simulated Kubernetes' state: one directory per namespace below `<state-dir>/kube/`.

  kube/<namespace>/pods.json         every pod: app label, node, NPUs, port, the PID of its process and that
                                     process's start time (a PID reused by another process is never "running")
  kube/<namespace>/coordinator.json  the P/D instances the coordinator routes to
  kube/<namespace>/logs/<pod>.log    a pod's stdout and stderr (`kubectl logs`)
The state dir is the cluster's (`simcluster up --state-dir`), found from a session's SIMCLUSTER_NODE_DIR
(`<state-dir>/nodes/<node>`). `up` makes `kube/` the login user's, who runs the scripts.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from simcluster import procs
from simcluster.sshnode import pid_alive

APP_CONTROLLER = "mindie-ms-controller"
APP_COORDINATOR = "mindie-ms-coordinator"
APP_SERVER = "mindie-ms-server"  # MindIE-Motor's AscendJob label for P and D servers (log.sh)


class KubeError(RuntimeError):
    pass


def state_dir_from_env() -> Path:
    node_dir = os.environ.get("SIMCLUSTER_NODE_DIR")
    if not node_dir:
        raise KubeError("SIMCLUSTER_NODE_DIR is not set: run this in an SSH session on a simcluster node")
    return Path(node_dir).resolve().parent.parent


def kube_root(state_dir: Path) -> Path:
    return Path(state_dir) / "kube"


def ns_dir(state_dir: Path, namespace: str) -> Path:
    return kube_root(state_dir) / namespace


def namespaces(state_dir: Path) -> list[str]:
    root = kube_root(state_dir)
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/pods.json"))


def load_namespace(state_dir: Path, namespace: str) -> dict | None:
    path = ns_dir(state_dir, namespace) / "pods.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def save_namespace(state_dir: Path, namespace: str, doc: dict) -> None:
    directory = ns_dir(state_dir, namespace)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pods.json"
    tmp = path.with_name(f".pods.json.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.chmod(0o644)  # `down` (root) trusts the PIDs in here: only the login user may write them
    os.replace(tmp, path)


def new_namespace(state_dir: Path, namespace: str) -> dict:
    root = kube_root(state_dir)
    if not root.is_dir() or not os.access(root, os.W_OK):
        raise KubeError(f"{root} is missing or not writable: this cluster's `simcluster up` predates the MindIE "
                        f"simulator; run `simcluster down` and `up` again")
    if load_namespace(state_dir, namespace) is not None:
        raise KubeError(f'namespace "{namespace}" already holds a MindIE deployment: run `bash delete.sh {namespace}` '
                        f"first")
    doc = {"namespace": namespace, "created": time.time(), "pods": []}
    (ns_dir(state_dir, namespace) / "logs").mkdir(parents=True, exist_ok=True)
    return doc


def pod_running(pod: dict) -> bool:
    pid = pod.get("pid")
    return bool(pid) and pid_alive(pid) and procs.start_time(pid) == pod.get("pid_start")


def phase(pod: dict) -> str:
    if not pod.get("pid"):
        return "Pending"
    return "Running" if pod_running(pod) else "Failed"


def stop_pod(pod: dict) -> bool:
    """Stop the pod's process by its recorded PID, only while that PID is still the process the pod started."""
    if not pod_running(pod):
        return False
    return procs.stop_pid(pod["pid"])


def delete_namespace(state_dir: Path, namespace: str) -> list[str] | None:
    """Stop every pod of the namespace, then remove its state. None if there is no such namespace."""
    doc = load_namespace(state_dir, namespace)
    if doc is None:
        return None
    lines = []
    for pod in doc["pods"]:
        stopped = stop_pod(pod)
        how = f"pid {pod['pid']} stopped" if stopped else "no process" if not pod.get("pid") else "already gone"
        lines.append(f'pod "{pod["name"]}" deleted ({how})')
    shutil.rmtree(ns_dir(state_dir, namespace), ignore_errors=True)
    return lines


def running_pod_pids(state_dir: Path, uid: int) -> list[tuple[str, str, int]]:
    """(namespace, pod, pid) of every pod process still running as uid (the login user): what `simcluster down`
    stops."""
    found = []
    for namespace in namespaces(state_dir):
        for pod in (load_namespace(state_dir, namespace) or {}).get("pods", []):
            if pod_running(pod) and procs.uid_of(pod["pid"]) == uid:
                found.append((namespace, pod["name"], pod["pid"]))
    return found


def pods_with_label(doc: dict, app: str | None) -> list[dict]:
    return [p for p in doc["pods"] if app is None or p["app"] == app]
