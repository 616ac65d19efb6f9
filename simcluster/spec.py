"""Cluster spec: which nodes exist, their addresses and hardware, and where the shared services run.

The default is the reference cluster of docs/reference-cluster.md. A spec file (YAML) has the same shape:
  name, nodes: [{name, address, ssh_port, hardware: A3|910B|"", role, labels}],
  services: {host, mooncake_rpc_port, mooncake_metrics_port, memcached_ports: [...]}
Containers (simcluster/containers/): `container_engine: docker|podman|none` and `images: [{ref, id, digest}]`, both
cluster-wide or per node (a node's own wins), and a node's `host_paths` (paths that exist on it beyond this machine's
own files); node_containers() gives each node's, with the defaults below.
Versions: `versions: {driver, firmware, cann}`, cluster-wide or per node (a node's own key wins), default
DEFAULT_VERSIONS; npu-smi prints driver and firmware (`info`, `info -t board`); node_versions() merges them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import plainyaml

HARDWARE = {"A3": ("Atlas 800I A3", "Ascend910", 16), "910B": ("Atlas 800I A2", "910B2", 8),
            "": ("server", "", 0)}


def reference_spec(prefix: str = "127.0.10", ssh_port: int = 22) -> dict:
    def node(i, name, role, hw):
        return {"name": name, "address": f"{prefix}.{i}", "ssh_port": ssh_port, "hardware": hw, "role": role,
                "labels": {"role": role, "rack": "r1"}}

    return {
        "name": "reference",
        "description": "Reference PD cluster (simulated)",
        "nodes": [node(1, "node0", "prefill", "A3"), node(2, "node1", "prefill", "A3"),
                  node(3, "node2", "decode", "A3"), node(4, "node3", "decode", "A3"),
                  node(5, "proxy", "proxy", ""), node(6, "bench", "client", "")],
        # The simulator's own KV pool agent and store live on an address of their own (.7), so a deployment
        # can place its Mooncake master and memcached on the proxy node with the reference ports.
        "services": {"host": f"{prefix}.7", "mooncake_rpc_port": 50051, "mooncake_metrics_port": 9003,
                     "memcached_ports": [11211, 11212, 11213]},
    }


def load_spec(path: str | Path | None) -> dict:
    if not path:
        return reference_spec()
    spec = plainyaml.load(Path(path).read_text())
    for n in spec["nodes"]:
        n.setdefault("ssh_port", 22)
        n.setdefault("hardware", "")
        n.setdefault("labels", {"role": n.get("role", "")})
        if n["hardware"] not in HARDWARE:
            raise ValueError(f"node {n['name']}: hardware must be one of {sorted(HARDWARE)}")
    spec.setdefault("name", "simcluster")
    spec.setdefault("services", {})
    return spec


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


CONTAINER_ENGINES = ("docker", "podman", "none")
# The A3 vllm-ascend image (docs/container-launch-facts.md, "Image tag substitution"), present on every NPU node.
DEFAULT_IMAGE = {"ref": "quay.io/ascend/vllm-ascend:v0.23.0-a3", "id": _sha("simcluster image vllm-ascend v0.23.0-a3"),
                 "digest": _sha("simcluster digest vllm-ascend v0.23.0-a3")}
# What the A3 `docker run` line mounts from the host (docs/container-launch-facts.md §4, items 9-16): present on
# every NPU node, as on a real one, though not on this machine.
ASCEND_HOST_PATHS = ("/usr/local/dcmi", "/usr/local/Ascend/driver", "/usr/local/bin/npu-smi",
                     "/etc/ascend_install.info", "/etc/hccn.conf", "/root/.cache")
# The sources of the `models` and `model-cache` mounts of examples/reference-allowlist-containers.yaml: the
# shared weights and cache an NPU node of the reference cluster mounts.
SHARED_HOST_PATHS = ("/models", "/mnt/sfs_turbo/.cache")
# What the simulated cluster's inventory lets a container topology name: the image above and the PD guide's bind
# mounts plus the reference weights. examples/reference-allowlist-containers.yaml is the same list for operators
# (tests/simcluster/test_container_allowlist.py keeps the two equal); the simulator reads only its own packages.
CONTAINER_ALLOWLIST = {
    "images": [{"reference": DEFAULT_IMAGE["ref"]}],
    "mounts": [
        {"name": "dcmi", "host_path": "/usr/local/dcmi", "container_path": "/usr/local/dcmi"},
        {"name": "hccn-tool", "host_path": "/usr/local/Ascend/driver/tools/hccn_tool",
         "container_path": "/usr/local/Ascend/driver/tools/hccn_tool"},
        {"name": "npu-smi", "host_path": "/usr/local/bin/npu-smi", "container_path": "/usr/local/bin/npu-smi"},
        {"name": "driver-lib64", "host_path": "/usr/local/Ascend/driver/lib64",
         "container_path": "/usr/local/Ascend/driver/lib64"},
        {"name": "driver-version", "host_path": "/usr/local/Ascend/driver/version.info",
         "container_path": "/usr/local/Ascend/driver/version.info"},
        {"name": "ascend-install-info", "host_path": "/etc/ascend_install.info",
         "container_path": "/etc/ascend_install.info"},
        {"name": "hccn-conf", "host_path": "/etc/hccn.conf", "container_path": "/etc/hccn.conf"},
        {"name": "model-cache", "host_path": "/mnt/sfs_turbo/.cache", "container_path": "/root/.cache"},
        {"name": "models", "host_path": "/models", "container_path": "/models", "read_only": True},
    ],
}


# A current Atlas A3 stack: the driver/firmware pair of docs/readiness-facts.md §3.1's 25.2.0 capture, and CANN 8.5.0
# (the first release with the /usr/local/Ascend/cann layout, §3.3).
DEFAULT_VERSIONS = {"driver": "25.2.0", "firmware": "7.7.0.6.236", "cann": "8.5.0"}


def node_versions(spec: dict, node: dict) -> dict:
    versions = dict(DEFAULT_VERSIONS)
    for source in (spec.get("versions") or {}, node.get("versions") or {}):
        unknown = set(source) - set(DEFAULT_VERSIONS)
        if unknown:
            raise ValueError(f"node {node['name']}: versions keys are {sorted(DEFAULT_VERSIONS)}, not {sorted(unknown)}")
        versions |= {key: str(value) for key, value in source.items()}
    return versions


def node_containers(spec: dict, node: dict) -> dict:
    """A node's container engine, local images and extra host paths (what node.json carries for the shims)."""
    has_npus = HARDWARE[node.get("hardware", "")][2] > 0
    engine = node.get("container_engine", spec.get("container_engine", "docker"))
    if engine not in CONTAINER_ENGINES:
        raise ValueError(f"node {node['name']}: container_engine must be one of {CONTAINER_ENGINES}")
    images = node.get("images", spec.get("images", [DEFAULT_IMAGE] if has_npus else []))
    for image in images:
        missing = {"ref", "id", "digest"} - set(image)
        if missing:
            raise ValueError(f"node {node['name']}: image {image} lacks {sorted(missing)}")
    paths = node.get("host_paths", [*ASCEND_HOST_PATHS, *SHARED_HOST_PATHS] if has_npus else [])
    return {"container_engine": engine, "images": [dict(i) for i in images], "host_paths": list(paths),
            "npu_count": HARDWARE[node.get("hardware", "")][2]}
