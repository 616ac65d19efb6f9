"""The `kubectl` on every sim node's PATH, for the simulated MindIE's pods (kube.py). Exactly:
  kubectl get pods -n NS [-o json|wide]
  kubectl logs -n NS POD | kubectl logs -n NS -l app=LABEL [--tail=N]    (default tail: all; 10 with -l)
  kubectl delete namespace NS
Anything else: `error: unknown command ...` on stderr, exit 1.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from datetime import UTC, datetime

from simcluster.mindie import kube


class Usage(Exception):
    pass


def _options(argv: list[str]) -> tuple[list[str], dict]:
    words, opts = [], {}
    names = {"-n": "namespace", "--namespace": "namespace", "-o": "output", "--output": "output",
             "-l": "selector", "--selector": "selector", "--tail": "tail"}
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, eq, value = arg.partition("=")
        if key in names and eq:
            opts[names[key]] = value
        elif arg in names:
            if i + 1 >= len(argv):
                raise Usage(f"error: flag needs an argument: {arg}")
            opts[names[arg]] = argv[i + 1]
            i += 1
        elif arg.startswith("-"):
            raise Usage(f"error: unknown flag: {arg}")
        else:
            words.append(arg)
        i += 1
    return words, opts


def _probe(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


def _ready(pod: dict, doc: dict, state_dir) -> bool:
    if kube.phase(pod) != "Running":
        return False
    if pod["app"] == kube.APP_SERVER:
        return _probe(f"http://{pod['address']}:{pod['port']}/health")
    if pod["app"] == kube.APP_COORDINATOR:
        try:
            plan = json.loads((kube.ns_dir(state_dir, doc["namespace"]) / "coordinator.json").read_text())
        except (OSError, json.JSONDecodeError):
            return False
        return _probe(f"http://{plan['host']}:{plan['manage_port']}/v1/readiness")
    return True


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_json(pod: dict, doc: dict, state_dir) -> dict:
    phase, ready = kube.phase(pod), _ready(pod, doc, state_dir)
    status = {"phase": phase, "containerStatuses": [{"name": pod["app"], "ready": ready, "restartCount": 0,
                                                     "started": phase == "Running"}]}
    if pod.get("node"):
        status.update(podIP=pod["address"], hostIP=pod["address"], podIPs=[{"ip": pod["address"]}])
    else:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    spec = {"hostNetwork": True, "containers": [{"name": pod["app"]}]}
    if pod.get("node"):
        spec["nodeName"] = pod["node"]
    if pod.get("devices"):
        spec["containers"][0]["resources"] = {"requests": {"huawei.com/Ascend910": str(len(pod["devices"]))}}
    if pod.get("port"):
        spec["containers"][0]["ports"] = [{"name": "predict", "containerPort": pod["port"], "hostPort": pod["port"],
                                           "protocol": "TCP"}]
    labels = {"app": pod["app"]}
    if pod.get("role") in ("prefill", "decode"):
        labels["mindie-role"] = pod["role"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod["name"], "namespace": doc["namespace"], "labels": labels,
                         "creationTimestamp": _stamp(pod["created"]),
                         "annotations": {"sim.pdcp.dev/pid": str(pod.get("pid") or ""),
                                         "sim.pdcp.dev/npu-devices": ",".join(str(d) for d in pod.get("devices", [])),
                                         "sim.pdcp.dev/port": str(pod.get("port") or "")}},
            "spec": spec, "status": status}


def _age(created: float) -> str:
    s = int(time.time() - created)
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def get_pods(namespace: str, output: str | None, state_dir) -> int:
    doc = kube.load_namespace(state_dir, namespace)
    items = [pod_json(p, doc, state_dir) for p in doc["pods"]] if doc else []
    if output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}},
                         indent=4))
        return 0
    if output not in (None, "wide"):
        raise Usage(f"error: unable to match a printer suitable for the output format \"{output}\", allowed "
                    f"formats are: json,wide")
    if not items:
        print(f"No resources found in {namespace} namespace.", file=sys.stderr)
        return 0
    head = ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    if output == "wide":
        head += ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
    rows = [head]
    for item, pod in zip(items, doc["pods"], strict=True):
        st = item["status"]
        row = [pod["name"], "1/1" if st["containerStatuses"][0]["ready"] else "0/1", st["phase"], "0",
               _age(pod["created"])]
        if output == "wide":
            row += [st.get("podIP", "<none>"), item["spec"].get("nodeName", "<none>"), "<none>", "<none>"]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        print("   ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _tail(text: str, n: int) -> str:
    if n < 0:
        return text
    lines = text.splitlines(keepends=True)
    return "".join(lines[-n:]) if n else ""


def logs(namespace: str, words: list[str], opts: dict, state_dir) -> int:
    doc = kube.load_namespace(state_dir, namespace)
    selector = opts.get("selector")
    tail = int(opts.get("tail", "10" if selector else "-1"))
    if selector:
        key, _, app = selector.partition("=")
        if key != "app" or not app:
            raise Usage(f"error: the simulated kubectl selects by app=LABEL only, got {selector!r}")
        pods = kube.pods_with_label(doc, app) if doc else []
        if not pods:
            print(f"No resources found in {namespace} namespace.", file=sys.stderr)
            return 0
    else:
        if len(words) != 1:
            raise Usage("error: expected 'logs [-n NAMESPACE] (POD | -l app=LABEL) [--tail=N]'")
        pods = [p for p in (doc or {}).get("pods", []) if p["name"] == words[0]]
        if not pods:
            print(f'Error from server (NotFound): pods "{words[0]}" not found', file=sys.stderr)
            return 1
    for pod in pods:
        if not pod.get("log"):
            if not selector:
                print(f'Error from server (BadRequest): container "{pod["app"]}" in pod "{pod["name"]}" is waiting '
                      f"to start: ContainerCreating", file=sys.stderr)
                return 1
            continue
        try:
            text = open(pod["log"], errors="replace").read()
        except OSError:
            text = ""
        sys.stdout.write(_tail(text, tail))
    return 0


def delete_namespace(namespace: str, state_dir) -> int:
    lines = kube.delete_namespace(state_dir, namespace)
    if lines is None:
        print(f'Error from server (NotFound): namespaces "{namespace}" not found', file=sys.stderr)
        return 1
    print(f'namespace "{namespace}" deleted')
    return 0


def run(argv: list[str]) -> int:
    try:
        words, opts = _options(argv)
        state_dir = kube.state_dir_from_env()
        namespace = opts.get("namespace", "default")
        if words[:2] == ["get", "pods"] and len(words) == 2 or words[:2] == ["get", "pod"] and len(words) == 2:
            return get_pods(namespace, opts.get("output"), state_dir)
        if words[:1] == ["logs"]:
            return logs(namespace, words[1:], opts, state_dir)
        if words[:2] in (["delete", "namespace"], ["delete", "ns"]) and len(words) == 3:
            return delete_namespace(words[2], state_dir)
        raise Usage(f"error: unknown command \"{' '.join(argv)}\" for \"kubectl\" (the simulated kubectl knows: "
                    f"get pods -n NS [-o json|wide]; logs -n NS (POD | -l app=LABEL) [--tail=N]; "
                    f"delete namespace NS)")
    except Usage as exc:
        print(exc, file=sys.stderr)
        return 1
    except kube.KubeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
