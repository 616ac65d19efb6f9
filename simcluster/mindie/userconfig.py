"""user_config.json (version v1.0) checked as MindIE-Motor's utils/validate_config.py checks it, plus what the
simulator needs to run it; a bad field is a ConfigError naming it by its path in the file.

Ranges are MindIE's (validate_deploy_config): p/d_instances_num 1..20, single_p_instance_pod_num 1..8,
single_d_instance_pod_num 1..20, p/d_pod_npu_num 1..16, p/d_instances_scale_num -20..20, *_distribute_enable 0|1.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

HARDWARE_TYPES = {"800I_A2": "910B", "800I_A3": "A3"}  # deploy_config.hardware_type -> simcluster node hardware
NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # a Kubernetes namespace (RFC 1123 label)
PARALLEL_FIELDS = ("worldSize", "dp", "tp", "moe_ep", "moe_tp", "sp", "cp", "pp")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class RoleShape:
    """One role's instances (every P instance has the same shape, and so has every D)."""

    role: str  # "prefill" | "decode"
    instances: int
    pods_per_instance: int
    npus_per_pod: int
    model_name: str
    tp: int
    dp: int
    moe_ep: int
    max_seq_len: int
    max_batch_size: int

    @property
    def dp_per_pod(self) -> int:
        return self.npus_per_pod // self.tp


@dataclass(frozen=True)
class UserConfig:
    job_id: str
    hardware: str  # simcluster hardware name the pods need: "A3" | "910B"
    predict_port: int
    manage_port: int
    prefill: RoleShape
    decode: RoleShape
    raw: dict


def _at(doc: dict, path: str):
    node = doc
    for part in path.split("."):
        key = int(part) if part.isdigit() else part
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            raise ConfigError(f"{path} is missing") from None
    return node


def _int(doc: dict, path: str, low: int, high: int | None = None) -> int:
    value = _at(doc, path)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{path} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise ConfigError(f"{path} must be an integer {bound}, got {value}")
    return value


def _str(doc: dict, path: str, min_len: int = 0, max_len: int = 1024) -> str:
    value = _at(doc, path)
    if not isinstance(value, str) or not min_len <= len(value) <= max_len:
        raise ConfigError(f"{path} must be a string of {min_len} to {max_len} characters, got {value!r}")
    return value


def _port(doc: dict, path: str) -> int:
    value = _at(doc, path)
    text = str(value) if not isinstance(value, bool) else ""
    if not text.isdigit() or not 1024 <= int(text) <= 65535:
        raise ConfigError(f"{path} must be a port from 1024 to 65535 (a string, as in MindIE's sample), got {value!r}")
    return int(text)


def _bool_or_none(doc: dict, path: str) -> None:
    value = _at(doc, path)
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{path} must be true or false, got {value!r}")


def _deploy_config(doc: dict) -> None:
    d = "deploy_config"
    for name, low, high in (("p_instances_num", 1, 20), ("d_instances_num", 1, 20),
                            ("single_p_instance_pod_num", 1, 8), ("single_d_instance_pod_num", 1, 20),
                            ("p_pod_npu_num", 1, 16), ("d_pod_npu_num", 1, 16),
                            ("p_instances_scale_num", -20, 20), ("d_instances_scale_num", -20, 20),
                            ("prefill_distribute_enable", 0, 1), ("decode_distribute_enable", 0, 1)):
        _int(doc, f"{d}.{name}", low, high)
    for role in ("p", "d"):
        if _at(doc, f"{d}.{role}_instances_scale_num") != 0:
            raise ConfigError(f"{d}.{role}_instances_scale_num: the simulator deploys only (0), it does not scale")
    _str(doc, f"{d}.model_id", 0)
    _str(doc, f"{d}.image_name", 1)
    job_id = _str(doc, f"{d}.job_id", 1, 63)
    if not NAMESPACE_RE.match(job_id):
        raise ConfigError(f"{d}.job_id is the Kubernetes namespace: lower-case letters, digits and '-', starting "
                          f"and ending with a letter or digit, got {job_id!r}")
    hardware = _at(doc, f"{d}.hardware_type")
    if hardware not in HARDWARE_TYPES:
        raise ConfigError(f"{d}.hardware_type must be '800I_A2' or '800I_A3', got {hardware!r}")
    for name in ("mindie_env_path", "mindie_container_log_path", "weight_mount_path"):
        _str(doc, f"{d}.{name}", 1)
    _str(doc, f"{d}.mindie_host_log_path", 0)
    _bool_or_none(doc, f"{d}.tls_config.tls_enable")
    for optional in ("coordinator_backup_cfg.function_enable", "controller_backup_cfg.function_sw"):
        try:
            _at(doc, f"{d}.{optional}")
        except ConfigError:
            continue
        _bool_or_none(doc, f"{d}.{optional}")


def _role(doc: dict, role: str) -> RoleShape:
    short = role[0]
    section = f"mindie_server_{role}_config"
    pods = _at(doc, f"deploy_config.single_{short}_instance_pod_num")
    npus = _at(doc, f"deploy_config.{short}_pod_npu_num")
    if _at(doc, f"{section}.ServerConfig.inferMode") != "dmi":
        raise ConfigError(f"{section}.ServerConfig.inferMode must be 'dmi' (PD separation), "
                          f"got {_at(doc, f'{section}.ServerConfig.inferMode')!r}")
    _bool_or_none(doc, f"{section}.ServerConfig.distDPServerEnabled")
    _bool_or_none(doc, f"{section}.BackendConfig.multiNodesInferEnabled")
    if not isinstance(_at(doc, f"{section}.BackendConfig.npuDeviceIds"), list):
        raise ConfigError(f"{section}.BackendConfig.npuDeviceIds must be a list of lists of device ids")
    deploy = f"{section}.BackendConfig.ModelDeployConfig"
    max_seq = _int(doc, f"{deploy}.maxSeqLen", 1)
    max_input = _int(doc, f"{deploy}.maxInputTokenLen", 1)
    if max_input > max_seq:
        raise ConfigError(f"{deploy}.maxInputTokenLen ({max_input}) must not exceed maxSeqLen ({max_seq})")
    model = f"{deploy}.ModelConfig.0"
    name = _str(doc, f"{model}.modelName", 1, 256)
    _str(doc, f"{model}.modelWeightPath", 1)
    par = {f: _int(doc, f"{model}.{f}", 1) for f in PARALLEL_FIELDS}
    instance_npus = pods * npus
    if par["dp"] * par["tp"] != instance_npus:
        raise ConfigError(f"{model}.dp x tp ({par['dp']} x {par['tp']}) must equal the NPUs of one {role} instance: "
                          f"single_{short}_instance_pod_num x {short}_pod_npu_num = {pods} x {npus} = {instance_npus}")
    if npus % par["tp"]:
        raise ConfigError(f"{model}.tp ({par['tp']}) must divide deploy_config.{short}_pod_npu_num ({npus}): a TP "
                          f"group lies within one pod")
    if par["moe_ep"] > 1 and par["moe_ep"] * par["moe_tp"] != instance_npus:  # moe_ep 1: no expert parallelism
        raise ConfigError(f"{model}.moe_ep x moe_tp ({par['moe_ep']} x {par['moe_tp']}) must equal the NPUs of one "
                          f"{role} instance ({instance_npus})")
    sched = f"{section}.BackendConfig.ScheduleConfig"
    for field in ("maxPrefillBatchSize", "maxPrefillTokens", "maxBatchSize", "maxIterTimes"):
        try:
            _at(doc, f"{sched}.{field}")
        except ConfigError:
            continue
        _int(doc, f"{sched}.{field}", 1)
    batch = _at(doc, sched).get("maxBatchSize") or 200
    return RoleShape(role=role, instances=_at(doc, f"deploy_config.{short}_instances_num"), pods_per_instance=pods,
                     npus_per_pod=npus, model_name=name, tp=par["tp"], dp=par["dp"], moe_ep=par["moe_ep"],
                     max_seq_len=max_seq, max_batch_size=batch)


def validate(doc) -> UserConfig:
    if not isinstance(doc, dict):
        raise ConfigError("the file must hold a JSON object")
    _str(doc, "version", 1, 16)
    _deploy_config(doc)
    mode = _at(doc, "mindie_ms_controller_config.deploy_mode")
    if mode != "pd_separate":
        raise ConfigError(f"mindie_ms_controller_config.deploy_mode: the simulator plays 'pd_separate' only, got {mode!r}")
    _bool_or_none(doc, "mindie_ms_controller_config.multi_node_infer_config.multi_node_infer_enable")
    http = "mindie_ms_coordinator_config.http_config"
    _str(doc, f"{http}.predict_ip", 1, 64)
    _str(doc, f"{http}.manage_ip", 1, 64)
    predict, manage = _port(doc, f"{http}.predict_port"), _port(doc, f"{http}.manage_port")
    if predict == manage:
        raise ConfigError(f"{http}.manage_port must differ from predict_port ({predict})")
    prefill, decode = _role(doc, "prefill"), _role(doc, "decode")
    if prefill.model_name != decode.model_name:
        raise ConfigError(f"mindie_server_decode_config.BackendConfig.ModelDeployConfig.ModelConfig.0.modelName "
                          f"({decode.model_name!r}) must equal the prefill config's ({prefill.model_name!r})")
    d = doc["deploy_config"]
    return UserConfig(job_id=d["job_id"], hardware=HARDWARE_TYPES[d["hardware_type"]], predict_port=predict,
                      manage_port=manage, prefill=prefill, decode=decode, raw=doc)


def load(path: str | Path) -> UserConfig:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"Json file path: '{path}' cannot be read: {exc.strerror}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    return validate(doc)
