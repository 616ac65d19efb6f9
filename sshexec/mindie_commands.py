"""Shell lines a MindIE deployment sends to its deploy host (docs/mindie.md §1): what an operator types there, every
word through shlex.quote, and the parsers of what comes back."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

q = shlex.quote

READY_LINE = "MindIE-MS coordinator is ready!!!"
COORDINATOR_LABEL = "mindie-ms-coordinator"


SCRIPTS = ("deploy_ac_job.py", "delete.sh")
# pdcp_root_owned: refuse (exit 1, the first bad path on stderr, top-down) unless each of "$@" exists, is no
# symbolic link, is root's and is writable by neither group nor others.
_ROOT_OWNED = (
    'pdcp_root_owned() { for p; do if [ -L "$p" ]; then echo "pdcp: refusing $p: it is a symbolic link" >&2; '
    'return 1; fi; s=$(stat --printf \'%u %a\' -- "$p" 2>/dev/null) || { echo "pdcp: refusing $p: it does not '
    'exist" >&2; return 1; }; u=${s% *}; a=${s#* }; '
    'if [ "$u" != 0 ]; then echo "pdcp: refusing $p: it is owned by uid $u, not root, and MindIE\'s deploy runs '
    'the Python found there" >&2; return 1; fi; '
    'if [ $((0$a & 022)) != 0 ]; then echo "pdcp: refusing $p: it is writable by group or others (mode $a), and '
    'MindIE\'s deploy runs the Python found there" >&2; return 1; fi; done; }'
)


def scripts_dir_guard(scripts_dir: str) -> str:
    """Exit 1, naming the path, unless scripts_dir, every directory above it and its deploy scripts are root's and
    writable by no one else: checked on the host, in the same shell line, right before a script of it runs."""
    path = PurePosixPath(scripts_dir)
    paths = [str(p) for p in (*reversed(path.parents), path)] + [str(path / name) for name in SCRIPTS]
    return f"{_ROOT_OWNED}; pdcp_root_owned {' '.join(q(p) for p in paths)}"


def deploy_command(scripts_dir: str, user_config: PurePosixPath | str) -> str:
    return (f"{scripts_dir_guard(scripts_dir)} && cd {q(scripts_dir)} && "
            f"python3 deploy_ac_job.py --user_config_path {q(str(user_config))}")


def same_file_command(path: PurePosixPath | str, content: str) -> str:
    """Exit 0 when the file at path holds exactly content (sha256), non-zero when it differs or is missing."""
    digest = hashlib.sha256(content.encode()).hexdigest()
    return f"printf '%s  %s\\n' {digest} {q(str(path))} | sha256sum -c --status -"


def delete_command(scripts_dir: str, job_id: str) -> str:
    return f"{scripts_dir_guard(scripts_dir)} && cd {q(scripts_dir)} && bash delete.sh {q(job_id)}"


def scripts_check_command(scripts_dir: str) -> str:
    """`ok <name>` or `missing <name>` per deploy script MindIE's directory must hold."""
    return "; ".join(f"if [ -f {q(f'{scripts_dir}/{name}')} ]; then echo ok {q(name)}; else echo missing {q(name)}; fi"
                     for name in SCRIPTS)


def coordinator_log_command(job_id: str, tail: int = -1) -> str:
    return f"kubectl logs -n {q(job_id)} -l app={COORDINATOR_LABEL} --tail={int(tail)}"


def pod_log_command(job_id: str, pod: str, tail: int) -> str:
    return f"kubectl logs -n {q(job_id)} {q(pod)} --tail={int(tail)}"


LOG_SCHEME = "kubectl:"  # a MindIE pod's Process.log_path: kubectl:<deploy host>/<namespace>/<pod>


def pod_log_path(deploy_host: str, job_id: str, pod: str) -> str:
    return f"{LOG_SCHEME}{deploy_host}/{job_id}/{pod}"


def split_pod_log_path(path: str) -> tuple[str, str, str] | None:
    """(deploy host, namespace, pod) of a pod_log_path, None for a log file's path."""
    if not path.startswith(LOG_SCHEME):
        return None
    parts = path[len(LOG_SCHEME):].split("/")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


def pods_command(job_id: str) -> str:
    return f"kubectl get pods -n {q(job_id)} -o json"


@dataclass(frozen=True)
class Pod:
    name: str
    app: str  # the app label: mindie-ms-controller, mindie-ms-coordinator, mindie-server...
    node: str  # spec.nodeName
    ip: str  # status.podIP (hostNetwork: the node's address)
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    ready: bool
    role: str  # prefill | decode | coordinator | controller | "" (from its labels)
    ports: tuple[int, ...]  # containerPorts, as declared


def parse_pods(stdout: str) -> list[Pod]:
    """`kubectl get pods -o json`; ValueError naming what is wrong with the document."""
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise ValueError(f"kubectl get pods did not print JSON (line {exc.lineno}: {exc.msg})") from None
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ValueError("kubectl get pods: expected an object with an items list")
    return [_pod(i, item) for i, item in enumerate(items)]


def _pod(index: int, item) -> Pod:
    if not isinstance(item, dict):
        raise ValueError(f"kubectl get pods: items[{index}] is not an object")
    meta, spec, status = (item.get(k) if isinstance(item.get(k), dict) else {} for k in ("metadata", "spec", "status"))
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"kubectl get pods: items[{index}].metadata.name is missing")
    containers = status.get("containerStatuses") if isinstance(status.get("containerStatuses"), list) else []
    ready = bool(containers) and all(isinstance(c, dict) and c.get("ready") is True for c in containers)
    ports = []
    for c in spec.get("containers") or []:
        for p in (c.get("ports") or []) if isinstance(c, dict) else []:
            if isinstance(p, dict) and isinstance(p.get("containerPort"), int):
                ports.append(p["containerPort"])
    app = str(labels.get("app", ""))
    return Pod(name=name, app=app, node=str(spec.get("nodeName") or ""), ip=str(status.get("podIP") or ""),
               phase=str(status.get("phase") or "Unknown"), ready=ready, role=pod_role(app, labels),
               ports=tuple(ports))


def natural_key(name: str) -> tuple:
    """Pods in the order MindIE numbers them: mindie-server-2-... before mindie-server-10-..."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def pod_role(app: str, labels: dict) -> str:
    if "coordinator" in app:
        return "coordinator"
    if "controller" in app:
        return "controller"
    said = str(labels.get("role") or labels.get("server-role") or labels.get("mindie-role") or "").lower()
    if said in ("prefill", "p"):
        return "prefill"
    if said in ("decode", "d"):
        return "decode"
    return ""
