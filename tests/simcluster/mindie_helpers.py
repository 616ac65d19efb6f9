"""Helpers for the simulated-MindIE tests (imported by plain name, as simtest_helpers is)."""

import copy
import json
import time

from tests.simcluster.simtest_helpers import REPO, ssh_run

SCRIPTS = "/var/lib/pdcp-sim/mindie/kubernetes_deploy_scripts"  # SIMCLUSTER_RUNTIME_ROOT's default
READY = "MindIE-MS coordinator is ready!!!"
FAST = "SIMCLUSTER_TIME_SCALE=0.05 SIMCLUSTER_STARTUP_S=0"


def sample_config() -> dict:
    return json.loads((REPO / "simcluster/mindie_scripts/user_config.json").read_text())


def user_config(job_id, p=(2, 1, 8), d=(1, 2, 8), p_tp=8, d_tp=1) -> dict:
    """p/d = (instances, pods per instance, NPUs per pod); dp follows from the NPUs, moe_ep = dp x tp."""
    doc = copy.deepcopy(sample_config())
    dc = doc["deploy_config"]
    dc.update(job_id=job_id, p_instances_num=p[0], single_p_instance_pod_num=p[1], p_pod_npu_num=p[2],
              d_instances_num=d[0], single_d_instance_pod_num=d[1], d_pod_npu_num=d[2],
              decode_distribute_enable=int(d[1] > 1), prefill_distribute_enable=int(p[1] > 1))
    for role, shape, tp in (("prefill", p, p_tp), ("decode", d, d_tp)):
        npus = shape[1] * shape[2]
        model = doc[f"mindie_server_{role}_config"]["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
        model.update(tp=tp, dp=npus // tp, moe_ep=npus, moe_tp=1, worldSize=npus)
    return doc


def put_config(client, directory: str, doc: dict) -> str:
    """The control plane's step: user_config.json into the run dir over SFTP, mode 0600."""
    ssh_run(client, f"mkdir -p {directory}")
    path = f"{directory}/user_config.json"
    sftp = client.open_sftp()
    with sftp.open(path, "w") as f:
        f.write(json.dumps(doc, indent=2))
    sftp.chmod(path, 0o600)
    sftp.close()
    return path


def deploy(client, path: str, timeout=30):
    return ssh_run(client, f"cd {SCRIPTS} && {FAST} python3 deploy_ac_job.py --user_config_path {path}", timeout)


def pods(client, namespace: str) -> dict:
    rc, out, err = ssh_run(client, f"kubectl get pods -n {namespace} -o json")
    assert rc == 0, err
    return {item["metadata"]["name"]: item for item in json.loads(out)["items"]}


def coordinator_log(client, namespace: str) -> str:
    rc, out, err = ssh_run(client, f"kubectl logs -n {namespace} -l app=mindie-ms-coordinator --tail=-1")
    assert rc == 0, err
    return out


def wait_ready(client, namespace: str, timeout=40.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        log = coordinator_log(client, namespace)
        if READY in log:
            return log
        assert time.monotonic() < deadline, f"no ready line within {timeout}s; coordinator log:\n{log}"
        time.sleep(0.3)


def delete(client, namespace: str):
    return ssh_run(client, f"cd {SCRIPTS} && bash delete.sh {namespace}", 60)
