"""`python3 deploy_ac_job.py --user_config_path F`: validate, "apply" the controller, coordinator and P/D server
pods, start one detached process per scheduled pod, and exit without waiting (as `kubectl apply` does)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from simcluster import procs
from simcluster.mindie import kube, placement, userconfig
from simcluster.mindie.userconfig import RoleShape, UserConfig

log = logging.getLogger("deploy_ac_job")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="deploy_ac_job.py")
    parser.add_argument("--user_config_path", default="./user_config.json", help="Path of user config")
    parser.add_argument("--conf_path", default="./conf", help="Path of conf (accepted, unused by the simulator)")
    parser.add_argument("--deploy_yaml_path", default="./deployment", help="Path of yaml (accepted, unused)")
    parser.add_argument("--output_path", default="./output", help="Path of output (accepted, unused)")
    return parser.parse_args(argv)


def _pod(name: str, app: str, role: str, instance: int | None = None) -> dict:
    return {"name": name, "app": app, "role": role, "instance": instance, "node": None, "address": None,
            "devices": [], "slot": None, "port": None, "pid": None, "pid_start": None, "created": time.time()}


def server_pods(cfg: UserConfig) -> list[dict]:
    """P instances are numbered first, then D (MindIE-Motor's order); pod 0 of an instance is its master."""
    pods = []
    index = 0
    for shape in (cfg.prefill, cfg.decode):
        for _ in range(shape.instances):
            for j in range(shape.pods_per_instance):
                suffix = "master-0" if j == 0 else f"worker-{j - 1}"
                pod = _pod(f"mindie-server-{index}-{suffix}", kube.APP_SERVER, shape.role, index)
                pod["pod_in_instance"] = j
                pods.append(pod)
            index += 1
    return pods


def schedule(cfg: UserConfig, pods: list[dict], nodes: list[placement.Node], deploy_host: str | None) -> None:
    control = placement.control_node(nodes, deploy_host)
    control.slots.add(0)  # the coordinator's predict port (1025 by default) lives there
    for pod in pods:
        if pod["role"] in ("controller", "coordinator"):
            pod.update(node=control.name, address=control.address)
            continue
        shape = cfg.prefill if pod["role"] == "prefill" else cfg.decode
        placed = placement.place_server(nodes, cfg.hardware, shape.npus_per_pod)
        if placed is None:
            log.warning("pod %s stays Pending: %s", pod["name"],
                        placement.why_pending(nodes, cfg.hardware, shape.npus_per_pod))
            continue
        node, dies = placed
        slot = node.take_slot()
        pod.update(node=node.name, address=node.address, devices=dies, slot=slot,
                   port=placement.server_port(slot), kv_port=placement.kv_port(slot))


def _kv_config(cfg: UserConfig, shape: RoleShape, kv_port: int) -> str:
    return json.dumps({
        "kv_connector": "MooncakeConnectorV1", "kv_port": str(kv_port),
        "kv_role": "kv_producer" if shape.role == "prefill" else "kv_consumer",
        "kv_connector_extra_config": {"prefill": {"dp_size": cfg.prefill.dp, "tp_size": cfg.prefill.tp},
                                      "decode": {"dp_size": cfg.decode.dp, "tp_size": cfg.decode.tp}}})


def server_argv(cfg: UserConfig, pod: dict) -> list[str]:
    shape = cfg.prefill if pod["role"] == "prefill" else cfg.decode
    section = cfg.raw[f"mindie_server_{shape.role}_config"]["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
    return [sys.executable, "-m", "simcluster.engine", "serve", section["modelWeightPath"],
            "--served-model-name", shape.model_name, "--host", pod["address"], "--port", str(pod["port"]),
            "-tp", str(shape.tp), "-dp", str(shape.dp),
            "--data-parallel-start-rank", str(pod["pod_in_instance"] * shape.dp_per_pod),
            "--data-parallel-size-local", str(shape.dp_per_pod), "--max-model-len", str(shape.max_seq_len),
            "--max-num-seqs", str(shape.max_batch_size), "--enable-expert-parallel",
            "--kv-transfer-config", _kv_config(cfg, shape, pod["kv_port"])]


def coordinator_plan(cfg: UserConfig, pods: list[dict], namespace_dir: Path) -> Path:
    instances: dict[int, dict] = {}
    for pod in pods:
        if pod["app"] != kube.APP_SERVER:
            continue
        inst = instances.setdefault(pod["instance"], {"role": pod["role"], "instance": pod["instance"], "pods": []})
        url = f"http://{pod['address']}:{pod['port']}" if pod["port"] else None
        inst["pods"].append({"name": pod["name"], "url": url})
    coordinator = next(p for p in pods if p["role"] == "coordinator")
    plan = {"model": cfg.prefill.model_name, "host": coordinator["address"], "predict_port": cfg.predict_port,
            "manage_port": cfg.manage_port, "instances": [instances[k] for k in sorted(instances)]}
    path = namespace_dir / "coordinator.json"
    path.write_text(json.dumps(plan, indent=1))
    return path


def _argv(cfg: UserConfig, pod: dict, plan: Path) -> list[str]:
    if pod["role"] == "coordinator":
        return [sys.executable, "-m", "simcluster.mindie", "coordinator", "--plan", str(plan)]
    if pod["role"] == "controller":
        return [sys.executable, "-m", "simcluster.mindie", "controller", "--plan", str(plan)]
    return server_argv(cfg, pod)


def start_pod(cfg: UserConfig, pod: dict, plan: Path, state_dir: Path, log_path: Path) -> None:
    node_dir = state_dir / "nodes" / pod["node"]
    env = {**os.environ, "SIMCLUSTER_NODE_DIR": str(node_dir), "SIMCLUSTER_NODE": pod["node"],
           "POD_IP": pod["address"], "MINDIE_POD_NAME": pod["name"], "PYTHONUNBUFFERED": "1"}
    if pod["devices"]:
        env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(str(d) for d in pod["devices"])
    else:
        env.pop("ASCEND_RT_VISIBLE_DEVICES", None)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(_argv(cfg, pod, plan), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=env, cwd=str(node_dir), start_new_session=True)
    pod["pid"], pod["pid_start"] = proc.pid, procs.start_time(proc.pid)
    pod["log"] = str(log_path)


def deploy(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(levelname)s - %(message)s", stream=sys.stdout)
    args = parse(argv)
    try:
        cfg = userconfig.load(args.user_config_path)
    except userconfig.ConfigError as exc:
        print(f"ValueError: {args.user_config_path}: {exc}", file=sys.stderr)
        return 1
    log.info("user config %s is valid: job_id %s, %d P instance(s) x %d pod(s) x %d NPU(s), %d D instance(s) x %d "
             "pod(s) x %d NPU(s), model %s", args.user_config_path, cfg.job_id, cfg.prefill.instances,
             cfg.prefill.pods_per_instance, cfg.prefill.npus_per_pod, cfg.decode.instances,
             cfg.decode.pods_per_instance, cfg.decode.npus_per_pod, cfg.prefill.model_name)
    try:
        state_dir = kube.state_dir_from_env()
        doc = kube.new_namespace(state_dir, cfg.job_id)
    except kube.KubeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    namespace_dir = kube.ns_dir(state_dir, cfg.job_id)
    log.info("Execute command: kubectl create namespace %s\n namespace/%s created", cfg.job_id, cfg.job_id)
    pods = [_pod(f"{cfg.job_id}-controller-master-0", kube.APP_CONTROLLER, "controller"),
            _pod(f"{cfg.job_id}-coordinator-master-0", kube.APP_COORDINATOR, "coordinator"), *server_pods(cfg)]
    schedule(cfg, pods, placement.cluster_nodes(state_dir), os.environ.get("SIMCLUSTER_NODE"))
    doc["pods"] = pods
    kube.save_namespace(state_dir, cfg.job_id, doc)
    plan = coordinator_plan(cfg, pods, namespace_dir)
    for pod in pods:
        log.info("Execute command: kubectl apply -f ./output/deployment/%s.yaml -n %s\n pod/%s created",
                 pod["name"], cfg.job_id, pod["name"])
        if pod["node"] is None:
            continue
        start_pod(cfg, pod, plan, state_dir, namespace_dir / "logs" / f"{pod['name']}.log")
        kube.save_namespace(state_dir, cfg.job_id, doc)
        where = f", NPUs {pod['devices']}, port {pod['port']}" if pod["devices"] else ""
        log.info("pod %s (app=%s) on %s (%s)%s, pid %d", pod["name"], pod["app"], pod["node"], pod["address"],
                 where, pod["pid"])
    pending = [p["name"] for p in pods if p["pid"] is None]
    if pending:
        log.warning("%d pod(s) Pending: %s", len(pending), ", ".join(pending))
    coordinator = next(p for p in pods if p["role"] == "coordinator")
    log.info("deployed job %s; the coordinator logs \"MindIE-MS coordinator is ready!!!\" once every instance is "
             "up (kubectl logs -n %s -l app=%s); requests to http://%s:%d", cfg.job_id, cfg.job_id,
             kube.APP_COORDINATOR, coordinator["address"], cfg.predict_port)
    return 0
