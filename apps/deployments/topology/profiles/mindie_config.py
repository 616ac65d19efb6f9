"""MindIE's user_config.json (version v1.0, docs/mindie.md §2) from a topology: one prefill and one decode server
config (MindIE has one for all instances of a role), the pods per instance from the nodes it spans, expert
parallelism as moe_ep / moe_tp. The operator's `mindie.extra` is deep-merged over it, never over a rendered field."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..allowlist import NO_ALLOWLIST, ClusterAllowlist
from ..node_facts import NodeFacts
from ..spec import InstanceSpec, MindieSchedule, TopologySpec

DEFAULT_MAX_SEQ_LEN = 8192
PREDICT_PORT = 1025  # MindIE coordinator defaults (ms_coordinator.json)
MANAGE_PORT = 1026
SCHEDULE_KEYS = {"max_prefill_batch_size": "maxPrefillBatchSize", "max_prefill_tokens": "maxPrefillTokens",
                 "max_batch_size": "maxBatchSize", "max_iter_times": "maxIterTimes"}


def role_instances(spec: TopologySpec, role: str) -> list[InstanceSpec]:
    return [i for i in spec.instances if i.role == role]


def hardware_type(spec: TopologySpec, nodes: dict[str, NodeFacts]) -> str:
    """800I_A3 when a Prefill node has 16 dies (A3's 8 NPUs x 2 dies), else 800I_A2, unless the spec says."""
    if spec.mindie.hardware_type:
        return spec.mindie.hardware_type
    first = role_instances(spec, "prefill")[0]
    return "800I_A3" if nodes[first.node].npu_count >= 16 else "800I_A2"


def rendered_config(spec: TopologySpec, nodes: dict[str, NodeFacts],
                    allowlist: ClusterAllowlist = NO_ALLOWLIST) -> dict[str, Any]:
    """The file before `extra` is merged: every field the topology decides. The image is the cluster's allowlisted
    one the topology names, pinned by its digest where the admin gave one."""
    mindie = spec.mindie
    image = allowlist.image(mindie.image_name)
    p, d = role_instances(spec, "prefill"), role_instances(spec, "decode")
    distributed = {role: _dp_distributed(group[0]) for role, group in (("p", p), ("d", d))}
    coordinator = nodes[spec.proxy.node].address
    return {
        "version": "v1.0",
        "deploy_config": {
            "p_instances_num": len(p),
            "d_instances_num": len(d),
            "single_p_instance_pod_num": len(p[0].span),
            "single_d_instance_pod_num": len(d[0].span),
            "p_pod_npu_num": p[0].npus,
            "d_pod_npu_num": d[0].npus,
            "p_instances_scale_num": 0,
            "d_instances_scale_num": 0,
            "model_id": spec.model.served_name,
            "prefill_distribute_enable": int(distributed["p"]),
            "decode_distribute_enable": int(distributed["d"]),
            "image_name": image.pinned if image else mindie.image_name,
            "job_id": mindie.job_id,
            "hardware_type": hardware_type(spec, nodes),
            "mindie_env_path": "./conf/mindie_env.json",
            "mindie_host_log_path": f"{spec.run_dir}/mindie-logs",
            "mindie_container_log_path": "/root/mindie",
            "weight_mount_path": mindie.weight_mount_path or spec.model.path,
            "tls_config": {"tls_enable": False},
        },
        "mindie_ms_controller_config": {
            "deploy_mode": "pd_separate",
            "multi_node_infer_config": {"multi_node_infer_enable": any(
                len(i.span) > 1 and not _dp_distributed(i) for i in spec.instances)},
        },
        "mindie_ms_coordinator_config": {
            "http_config": {"predict_ip": coordinator, "predict_port": str(spec.proxy.port),
                            "manage_ip": coordinator, "manage_port": str(spec.proxy.admin_port)},
        },
        "mindie_server_prefill_config": _server(spec, p[0], mindie.prefill, distributed["p"]),
        "mindie_server_decode_config": _server(spec, d[0], mindie.decode, distributed["d"]),
    }


def _dp_distributed(inst: InstanceSpec) -> bool:
    """External DP over several pods: each pod serves its own DP ranks (distDPServerEnabled); internal DP over
    several pods is one model instance spread over nodes (multiNodesInferEnabled)."""
    return len(inst.span) > 1 and inst.dp > 1 and inst.dp_style == "external"


def _server(spec: TopologySpec, inst: InstanceSpec, schedule: MindieSchedule, distributed: bool) -> dict:
    mindie = spec.mindie
    max_seq = mindie.max_seq_len or inst.max_model_len or DEFAULT_MAX_SEQ_LEN
    model = {
        "modelInstanceType": "Standard",
        "modelName": spec.model.served_name,
        "modelWeightPath": mindie.weight_mount_path or spec.model.path,
        "worldSize": inst.npus,
        "dp": inst.dp, "tp": inst.tp, "sp": 1, "cp": 1, "pp": 1,
    }
    if inst.expert_parallel:
        model.update(moe_ep=inst.ep, moe_tp=inst.npus_total // inst.ep)
    backend: dict[str, Any] = {
        "npuDeviceIds": [list(range(inst.npus))],  # a pod's own devices, as the device plugin mounts them
        "multiNodesInferEnabled": len(inst.span) > 1 and not distributed,
        "ModelDeployConfig": {"maxSeqLen": max_seq, "maxInputTokenLen": mindie.max_input_token_len or max_seq,
                              "ModelConfig": [model]},
    }
    scheduled = {SCHEDULE_KEYS[k]: v for k, v in vars(schedule).items() if v is not None}
    if inst.max_num_seqs and "maxBatchSize" not in scheduled:
        scheduled["maxBatchSize"] = inst.max_num_seqs
    if scheduled:
        backend["ScheduleConfig"] = scheduled
    return {"ServerConfig": {"inferMode": "dmi", "distDPServerEnabled": distributed}, "BackendConfig": backend}


def _leaves(*keys: str) -> dict:
    return dict.fromkeys(keys)


_SERVER_RENDERED = {
    "ServerConfig": _leaves("inferMode", "distDPServerEnabled"),
    "BackendConfig": {
        "npuDeviceIds": None, "multiNodesInferEnabled": None,
        "ModelDeployConfig": {"maxSeqLen": None, "maxInputTokenLen": None, "ModelConfig": [_leaves(
            "modelInstanceType", "modelName", "modelWeightPath", "worldSize", "dp", "tp", "sp", "cp", "pp", "moe_ep",
            "moe_tp")]},
        "ScheduleConfig": _leaves(*SCHEDULE_KEYS.values()),
    },
}
# Every field rendered_config may write, whether or not this topology writes it (moe_ep, ScheduleConfig): a leaf is
# None. mindie.extra may never set one (mindie_extra.py); a test keeps it a superset of what is rendered.
RENDERED = {
    "version": None,
    "deploy_config": {**_leaves(
        "p_instances_num", "d_instances_num", "single_p_instance_pod_num", "single_d_instance_pod_num", "p_pod_npu_num",
        "d_pod_npu_num", "p_instances_scale_num", "d_instances_scale_num", "model_id", "prefill_distribute_enable",
        "decode_distribute_enable", "image_name", "job_id", "hardware_type", "mindie_env_path", "mindie_host_log_path",
        "mindie_container_log_path", "weight_mount_path"), "tls_config": _leaves("tls_enable")},
    "mindie_ms_controller_config": {"deploy_mode": None, "multi_node_infer_config": _leaves("multi_node_infer_enable")},
    "mindie_ms_coordinator_config": {"http_config": _leaves("predict_ip", "predict_port", "manage_ip", "manage_port")},
    "mindie_server_prefill_config": _SERVER_RENDERED,
    "mindie_server_decode_config": _SERVER_RENDERED,
}


def merged(rendered: dict, extra: Mapping) -> dict:
    out = dict(rendered)
    for key, value in extra.items():
        if isinstance(out.get(key), Mapping) and isinstance(value, Mapping):
            out[key] = merged(dict(out[key]), value)
        elif key == "ModelConfig" and isinstance(out.get(key), list) and isinstance(value, list):
            out[key] = [merged(dict(out[key][0]), value[0])]
        else:
            out[key] = value
    return out


def user_config(spec: TopologySpec, nodes: dict[str, NodeFacts], allowlist: ClusterAllowlist = NO_ALLOWLIST) -> dict:
    return merged(rendered_config(spec, nodes, allowlist), spec.mindie.extra)


def user_config_text(spec: TopologySpec, nodes: dict[str, NodeFacts], allowlist: ClusterAllowlist = NO_ALLOWLIST) -> str:
    return json.dumps(user_config(spec, nodes, allowlist), indent=2, ensure_ascii=False) + "\n"
