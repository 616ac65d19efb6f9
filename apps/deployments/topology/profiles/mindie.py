"""`mindie` profile: MindIE's Kubernetes deploy scripts start the cluster (docs/mindie.md). The control plane writes
user_config.json to the deploy host, runs deploy_ac_job.py there, waits for the coordinator's ready line and reads
where the pods landed; MindIE's coordinator is the proxy. The plan's processes are the pods it expects — one per
node an instance spans — and the coordinator, so the picture and the HBM check see the same layout as the other
profiles."""

from __future__ import annotations

from pathlib import PurePosixPath
from types import MappingProxyType

from sshexec import LaunchSpec
from sshexec import mindie_commands as commands

from ..allowlist import NO_ALLOWLIST, ClusterAllowlist
from ..node_facts import NodeFacts
from ..placement import assign_devices
from ..plan import MindiePlan, Plan, PlannedProcess, Stage
from ..spec import TopologySpec
from .mindie_config import user_config_text

USER_CONFIG = "user_config.json"


def user_config_path(spec: TopologySpec) -> PurePosixPath:
    return PurePosixPath(spec.run_dir) / USER_CONFIG


class MindieProfile:
    name = "mindie"
    # MindIE takes no engine flags or env from us: everything is user_config.json (mindie.extra); validation
    # refuses extra_args and env on instances (topology/mindie_rules.py).
    owned_flags = MappingProxyType({})
    owned_env = MappingProxyType({})
    allowed_flags = MappingProxyType({})
    allowed_env = frozenset()
    uses_npus = True
    min_health_timeout = 0  # its deploy waits for the coordinator's ready line (ready_timeout_s), not this gate
    install_hints = MappingProxyType({})
    runtime = "mindie-k8s"  # MindIE's Kubernetes deploy scripts on the deploy host, not processes of ours

    def required_files(self, spec: TopologySpec) -> dict[str, str]:
        return {}  # its preflight runs on the deploy host (runtimes/mindie_k8s.py)

    def render(self, spec: TopologySpec, nodes: dict[str, NodeFacts], allowlist: ClusterAllowlist = NO_ALLOWLIST) -> Plan:
        m = spec.mindie
        host = nodes[m.deploy_host]
        path = user_config_path(spec)
        devices = assign_devices(spec, nodes)
        pods = []
        for inst in spec.instances:
            for i, node_name in enumerate(inst.span):
                node = nodes[node_name]
                visible = ",".join(map(str, devices[inst.name, node_name]))
                # api_port: the server's port in its pod (MindIE Server's 1025 by default; hostNetwork, so on the node)
                pods.append(self._pod(spec, f"{inst.name}-pod{i}", inst.role, inst.name, node, i * inst.dp_local,
                                      {"ASCEND_RT_VISIBLE_DEVICES": visible}, ports=(inst.api_port,)))
        coordinator_node = nodes[spec.proxy.node]
        coordinator = self._pod(spec, "coordinator", "proxy", None, coordinator_node, None, {},
                                ports=(spec.proxy.port, spec.proxy.admin_port))
        mindie = MindiePlan(
            deploy_host=host.name, address=host.address, scripts_dir=m.scripts_dir, job_id=m.job_id,
            user_config_path=path, user_config=user_config_text(spec, nodes, allowlist),
            deploy=commands.deploy_command(m.scripts_dir, path), ready=commands.coordinator_log_command(m.job_id),
            pods=commands.pods_command(m.job_id), delete=commands.delete_command(m.scripts_dir, m.job_id),
            ready_timeout_s=m.ready_timeout_s)
        return Plan(profile=self.name, stages=(Stage("engines", tuple(pods)), Stage("proxy", (coordinator,))),
                    mindie=mindie)

    def _pod(self, spec: TopologySpec, key: str, role: str, instance: str | None, node: NodeFacts,
             dp_rank: int | None, env: dict, ports: tuple[int, ...] = ()) -> PlannedProcess:
        run = PurePosixPath(spec.run_dir)
        # Kubernetes runs it: the launch only carries what the picture reads (the devices), never a start line.
        launch = LaunchSpec(argv=("kubernetes-pod", spec.mindie.job_id, key), env=MappingProxyType(env), workdir=run,
                            log_file=run / "logs" / f"{key}.log", pid_file=run / "pids" / f"{key}.pid")
        return PlannedProcess(key=key, role=role, instance=instance, node=node.name, address=node.address,
                              dp_rank=dp_rank, launch=launch, health_url=None, ports=ports, kv_port_window=None)
