"""Hostile text in the spec's free-text fields reaches the node's processes as exactly the text given, and no
injected command runs: checked on the node itself, not on the rendered shell line.

A simulated cluster (real sshd per node) on 127.0.10.10 (node0), .11 (node1) and .14 (proxy) runs a real deploy job
of a topology whose model path, served model name and KV pool install path (each a single string holding every
trick at once; the install path reaches the engines as LD_LIBRARY_PATH's prepend), engine env values (one hostile
string each) and a JSON extra-arg value carry shell syntax, quotes, newlines, globs, `--flag`s and unicode. Then /proc/<pid>/cmdline and /proc/<pid>/environ of each process the deploy started (pids from the run
dir's pid files) must hold each value as one argv element or env value, unchanged; the deploy's completion must
have gone through with the hostile served name; no marker file an injection would create exists; and after stop
nothing of the deployment runs. Values the spec refuses instead (a model path that reads as an option, a run dir
with shell syntax) must be refused naming their field.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.procs,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(300), pytest.mark.usefixtures("no_celery")]

FIRST = 10  # node0 .10, node1 .11, (node2 .12, node3 .13 dropped), proxy .14, (bench .15 dropped)
DROPPED = ("node2", "node3", "bench")
COMPILATION_CONFIG = '{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1, 2]}'
# Engine env names the sim profile allows and the simulated engine never reads (it reads
# VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT as a number): any text is a valid value there.
ENV_NAMES = ["VLLM_RPC_TIMEOUT", "HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "VLLM_LOGGING_LEVEL", "HCCL_BUFFSIZE",
             "OMP_PROC_BIND", "TASK_QUEUE_ENABLE", "HCCL_OP_EXPANSION_MODE", "ASCEND_CONNECT_TIMEOUT",
             "ASCEND_TRANSFER_TIMEOUT", "VLLM_ENGINE_ITERATION_TIMEOUT_S", "ACL_OP_INIT_MODE",
             "VLLM_ENGINE_READY_TIMEOUT_S", "HCCL_INTRA_ROCE_ENABLE", "GLOO_SOCKET_IFNAME",
             "TP_SOCKET_IFNAME", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "ASCEND_ENABLE_USE_FABRIC_MEM"]


def hostile_strings(marker: str) -> list[str]:
    """Each would create `<marker>-<n>` (or write to it) if a shell ever read it as code."""
    m = [f"{marker}-{n}" for n in range(12)]
    return [
        f"$(touch {m[0]})", f"`touch {m[1]}`", f"; touch {m[2]}", f"x\ntouch {m[3]}\n", f"'; touch {m[4]}; '",
        f'"; touch {m[5]}; "', f"&& touch {m[6]} || touch {m[6]}", f"| tee {m[7]}", f"${{IFS}}touch${{IFS}}{m[8]}",
        f">{m[9]} 2>&1 <{m[9]}", f"\\$(touch {m[10]})\\", f"$'\\x41' $((1+1)) !! #{m[11]}",
        "--port 1 --host 0.0.0.0", "--enforce-eager", "* ? [a] {a,b} ~ ~root $HOME $PATH",
        "é ünïcode ✓\ttab  two  spaces ", "%s%n%x", "\r\n",
    ]


def every_trick(marker: str) -> str:
    """One string holding every kind of hostile piece, for the fields that take one value (200 characters at most)."""
    return (f"m $(touch {marker}a) `touch {marker}b`; touch {marker}c\n' \" && | >x * ? [a] ~ $HOME \\ "
            "é ✓\t--port 1")


def topology(run_dir: str, marker: str, values: list[str]) -> dict:
    env_p = dict(zip(ENV_NAMES, values, strict=False))
    env_d = dict(zip(ENV_NAMES, reversed(values), strict=False))
    def engine() -> dict:
        return {"tp": 16, "dp": 1, "api_port": 7100, "expert_parallel": True, "max_model_len": 32768,
                "max_num_seqs": 8, "extra_args": ["--enforce-eager", "--compilation-config", COMPILATION_CONFIG]}

    return {
        "launch_profile": "sim", "run_dir": run_dir,
        "model": {"path": every_trick(f"{marker}-path"), "served_name": every_trick(f"{marker}-name"),
                  "profile": "qwen3-235b-a22b"},
        "instances": [
            {"name": "p0", "role": "prefill", "node": "node0", "kv_port": 30000, **engine(),
             "env": {**env_p, "SIMCLUSTER_STARTUP_S": "0.2"}},
            {"name": "d0", "role": "decode", "node": "node1", "kv_port": 30200, **engine(),
             "env": {**env_d, "SIMCLUSTER_STARTUP_S": "0.2"}},
        ],
        "proxy": {"node": "proxy", "port": 1999, "policy": "least_conn", "workers": 1},
        # install_path reaches the engines' start line as LD_LIBRARY_PATH's prepend, next to the node's own value:
        # one plain directory (a ':' would add library dirs; the tricks in it are refused, below)
        "kv_pool": {"backend": "memcache", "node": "proxy", "install_path": "/opt/pdcp-hostile_lib.v1+x@y"},
    }


@pytest.fixture(scope="module")
def sim():
    from tests.deployments.simdeploy import running_cluster

    with running_cluster(FIRST, without=DROPPED) as state:
        yield state


def proc_argv(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]


def proc_env(pid: int) -> dict[str, str]:
    items = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")[:-1]
    return dict(i.decode().split("=", 1) for i in items)


def test_hostile_values_arrive_intact_on_the_node_and_run_nothing(sim, run_dir, make_user, figure):
    from apps.deployments.models import Process
    from apps.deployments.revision_checks import RevisionInvalid
    from apps.deployments.revision_plan import deployment_plan
    from apps.deployments.services import (
        deployment_create,
        deployment_deploy,
        deployment_stop,
        revision_create,
    )
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import
    from tests.deployments.simdeploy import pid_alive, pids_in, processes_mentioning, run_job_now

    inventory_import(Path(sim["inventory"]).read_text(), allow_key_files=True)
    cluster = Cluster.objects.get(name="reference")
    operator = make_user("operator", "op")
    marker = f"/tmp/pdcp-pwned-{uuid.uuid4().hex[:12]}"
    values = hostile_strings(marker)
    spec = topology(run_dir, marker, values)
    deployment = deployment_create(name="hostile", cluster=cluster, user=operator, yaml_text=yaml.safe_dump(spec))

    # What the spec refuses must be refused naming the field, and store nothing.
    refused = {}
    for path, edit in (("model.path", lambda d: d["model"].update(path="--trust-remote-code")),
                       ("model.served_name", lambda d: d["model"].update(served_name="-x")),
                       ("model.served_name", lambda d: d["model"].update(served_name="x" * 201)),
                       ("run_dir", lambda d: d.update(run_dir=f"{run_dir}/$(touch {marker}-dir)")),
                       ("instances[0].env.BASH_ENV", lambda d: d["instances"][0]["env"].update(BASH_ENV=values[0])),
                       ("kv_pool.install_path", lambda d: d["kv_pool"].update(
                           install_path="/opt/" + every_trick(f"{marker}-lib").replace("\n", " ").replace("\t", " ")))):
        data = json.loads(json.dumps(spec))
        edit(data)
        with pytest.raises(RevisionInvalid) as caught:
            revision_create(deployment=deployment, user=operator, yaml_text=yaml.safe_dump(data))
        named = [p.path for p in caught.value.problems]
        assert any(p.startswith(path) for p in named), (path, named)
        refused[f"{path} {data['model']['served_name'][:3]}"] = named
    assert deployment.revisions.count() == 1

    job = run_job_now(deployment_deploy, deployment, operator)
    assert job.status == "successful", job.explanation
    assert "answered a completion" in job.explanation  # sent with the hostile served name
    _spec, plan = deployment_plan(deployment)
    pids = pids_in(run_dir)
    assert set(pids) == {p.key for p in plan.processes} == set(Process.objects.values_list("key", flat=True))

    checked_argv = checked_env = 0
    for planned in plan.processes:
        pid = pids[planned.key]
        assert pid_alive(pid), planned.key
        argv = proc_argv(pid)
        # The shim execs `python -m <module> <args>`: the node's argv ends with exactly the planned arguments.
        assert argv[-(len(planned.launch.argv) - 1):] == list(planned.launch.argv[1:]), planned.key
        env = proc_env(pid)
        for name, value in planned.launch.env.items():
            if isinstance(value, str):
                assert env[name] == value, (planned.key, name)
                checked_env += value in values
            else:  # EnvExtend: the prepend, then the node's own value (if any) after the separator
                got = env[name]
                assert got == value.prepend or got.startswith(value.prepend + value.separator), (planned.key, got)
                checked_env += spec["kv_pool"]["install_path"] in value.prepend
        if planned.role in ("prefill", "decode"):
            assert argv.count(spec["model"]["path"]) == 1 and argv.count(spec["model"]["served_name"]) == 1
            assert argv[argv.index("--compilation-config") + 1] == COMPILATION_CONFIG
            assert [env[n] for n in ENV_NAMES[:len(values)]] == (
                values if planned.instance == "p0" else list(reversed(values)))
            checked_argv += 3
    injected = sorted(str(p) for p in Path("/tmp").glob(f"{Path(marker).name}*"))
    injected += [str(p) for p in Path(run_dir).rglob("*") if "pwned" in p.name or p.name in ("tee", "touch")]
    assert not injected, f"an injected command ran: {injected}"

    stopped = run_job_now(deployment_stop, deployment, operator)
    assert stopped.status == "successful", stopped.explanation
    assert not [pid for pid in pids.values() if pid_alive(pid)]
    assert not processes_mentioning(run_dir)
    assert not list(Path("/tmp").glob(f"{Path(marker).name}*"))

    figure("hostile-on-node",
           held="on the simulated nodes, /proc/<pid>/cmdline and /proc/<pid>/environ of every process the deploy "
                "started held each hostile value as exactly one argv element / env value, unchanged; the deploy's "
                "completion went through with the hostile served name; no marker file of an injected command "
                "existed during or after the deployment; after stop nothing of it ran; model path '--...', "
                "served name '-x' or of 201 characters, a run dir with '$(...)', env BASH_ENV and a KV pool install path "
                "with the shell tricks were refused naming their field",
           figure=f"{len(values)} hostile strings as {len(ENV_NAMES)} engine env values on each of 2 engines, one "
                  "string combining the shell tricks in model.path and model.served_name, a plain kv_pool.install_path "
                  "(LD_LIBRARY_PATH's prepend), and a JSON "
                  f"--compilation-config value: {len(plan.processes)} processes on 3 nodes, {checked_env} env values "
                  f"and {checked_argv} argv items checked on the node, all intact as one item; 0 injected commands "
                  f"ran; {len(refused)} refused values named their field",
           command='make test PYTEST_ARGS="tests/reliability/test_hostile_on_node.py"',
           values={"hostile_strings": len(values), "fields": 6, "processes": len(plan.processes),
                   "env_values_checked": checked_env, "argv_items_checked": checked_argv, "injected_ran": 0,
                   "refused": len(refused)})
