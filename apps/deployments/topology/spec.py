"""The typed PD topology: frozen dataclasses, parsing from plain data / YAML with field-path errors, diff.

Engine-neutral on purpose: a `vllm-ascend`, `sim` or later `mindie` launch profile renders the same spec, so
fields carry neutral names (tp, dp, expert_parallel, max_num_seqs) and engine flags live only in the profiles.
Parsing checks shapes and types; rules that need the inventory or several fields live in `validation.py`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from sshexec import EnvExtend

ROLES = ("prefill", "decode")
DP_STYLES = ("external", "internal")
POLICIES = ("round_robin", "least_conn", "consistent_hash", "cache_aware")  # pdproxy's; cache_aware: Prefill only
HASH_KEYS = ("request_id", "client_ip")
LAUNCH_PROFILES = ("vllm-ascend", "sim", "mindie", "vllm-cpu")  # vllm-cpu: docs/real-engine.md
POOL_BACKENDS = ("mooncake", "memcache")  # AscendStoreConnector backends we render (docs/ascend-pd-launch-facts.md §3)
LOAD_FAILURE_POLICIES = ("fail", "recompute")
# The P/D connector: pull = MooncakeConnectorV1 (D pulls from P), layerwise = MooncakeLayerwiseConnector (P pushes into
# D layer by layer; the proxy runs --pd-flow layerwise). docs/ascend-pd-launch-facts.md §1.4, §2.6.
KV_CONNECTORS = {"pull": "MooncakeConnectorV1", "layerwise": "MooncakeLayerwiseConnector"}
MEMCACHE_PROTOCOLS = ("device_sdma", "device_rdma")  # A3 over HCCS / A2 (and A3) over device RoCE
SIZE_RE = re.compile(r"^[1-9][0-9]*GB\Z")  # Mooncake's global_segment_size and MemCache's dram.size: whole GB
# Where run_dir goes when a spec leaves it out (<root>/<deployment name>): out of world-writable places, where another
# local user could plant the pid and log files first (the start refuses such a run dir). The simulated nodes' login
# user `simnode` is unprivileged, so the sim's root is its private pdcp-runs (simcluster/rundirs.py).
DEFAULT_RUN_ROOT = {"vllm-ascend": "/var/lib/pdcp", "sim": "/home/simnode/pdcp-runs", "mindie": "/var/lib/pdcp",
                    "vllm-cpu": "/var/lib/pdcp"}
KV_LAYOUTS = ("mha", "mla")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "int8": 1}
# Bytes per weight parameter by the checkpoint's format as the engine loads it (docs/hbm-fit.md); w8a8 is
# msModelSlim's int8 weights (+ int8 activations), whose per-channel scales add under 0.5% and are left out.
WEIGHT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "w8a8": 1}

# \Z, never $: "$" also matches before a final newline, so "p0\n" would pass and name files on the nodes.
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}\Z")  # instance names end up in file names and process keys
FLAG_RE = re.compile(r"^--[a-z0-9][a-z0-9-]*\Z")
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*\Z")
BOOK_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}\Z")  # an answer book's name (simcluster/answer_books/<name>.jsonl)


class SpecError(ValueError):
    """Bad input: `errors` is a list of (field path, message), e.g. ("instances[2].tp", "expected ...")."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = list(errors)
        super().__init__("; ".join(f"{p}: {m}" if p else m for p, m in self.errors))


@dataclass(frozen=True)
class ModelProfile:
    """Shape facts that size the KV cache.

    `kv_layout: mha` (also GQA/MQA): per token and layer the cache holds K and V for every KV head, so
    bytes = 2 * layers * kv_heads * head_dim * dtype_bytes. `kv_layout: mla` (DeepSeek-style latent
    attention) caches one compressed latent per layer, not separate K and V: set kv_heads to 1 and head_dim to
    kv_lora_rank + qk_rope_head_dim (e.g. 512 + 64), and the factor 2 is dropped.
    """

    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    attention_heads: int
    kv_layout: str = "mha"
    # Sizes for the HBM fit check (topology/hbm_fit.py, docs/hbm-fit.md); None = not given, the check is skipped.
    name: str | None = None  # the catalog entry it came from (topology/model_catalog.py), None when spelt out
    weights: str = "bfloat16"  # WEIGHT_BYTES: the format of the loaded weights
    params_b: float | None = None  # parameters loaded for serving, in billions
    expert_params_b: float = 0.0  # of which routed-expert parameters (MoE), split over TP x DP
    experts: int | None = None  # routed experts per MoE layer
    unquantized_params_b: float = 0.0  # of params_b, what stays bfloat16 in a quantized checkpoint (embeddings...)
    hidden_size: int | None = None  # sizes the activations of a forward pass
    max_position: int | None = None  # the model's max_position_embeddings: vLLM's max_model_len when none is set

    @property
    def has_sizes(self) -> bool:
        return self.params_b is not None

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_bytes_per_token(self) -> int:
        factor = 2 if self.kv_layout == "mha" else 1
        return factor * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True)
class ModelSpec:
    path: str  # weights path on the nodes (or a hub id)
    served_name: str
    profile: ModelProfile


@dataclass(frozen=True)
class InstanceSpec:
    """One Prefill or Decode instance: one DP group. It may span nodes (`nodes`): each node hosts dp / len(nodes)
    consecutive DP ranks on the same device slice; the first node is the DP master (--data-parallel-address)."""

    name: str
    role: str  # prefill | decode
    node: str  # the (first) node: the DP master
    tp: int
    dp: int = 1
    dp_style: str = "external"  # external: one process per DP rank; internal: one process per node
    devices: tuple[int, ...] | None = None  # logical NPU ids; None = the node's first free healthy ids
    api_port: int = 7100  # external DP: rank i listens on api_port + i
    kv_port: int = 30000  # base of the KV side-channel window (ports.kv_window)
    dp_rpc_port: int | None = None  # needed when dp > 1
    expert_parallel: bool = False
    # Expert-parallel group size: MindIE's moe_ep (moe_tp = tp * dp / ep_size); vLLM's EP group is always tp * dp.
    # None = tp * dp when expert_parallel is on.
    ep_size: int | None = None
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    extra_args: tuple[str, ...] = ()  # engine flags: "--flag" optionally followed by one value
    # A plain value replaces the node's; an EnvExtend ({prepend: ..} / {append: ..}) keeps it (LD_LIBRARY_PATH).
    env: Mapping[str, str | EnvExtend] = field(default_factory=lambda: MappingProxyType({}))
    nodes: tuple[str, ...] = ()  # every node the instance spans, `node` first; () = just `node`
    engine_id: str | None = None  # kv-transfer-config engine_id; None lets vllm-ascend generate one

    @property
    def span(self) -> tuple[str, ...]:
        return self.nodes or (self.node,)

    @property
    def dp_local(self) -> int:
        """DP ranks on each node it spans."""
        return max(1, self.dp // len(self.span))

    @property
    def npus(self) -> int:
        """NPUs on each node it spans (all of them when it spans one node)."""
        return self.tp * self.dp_local

    @property
    def npus_total(self) -> int:
        return self.tp * self.dp

    @property
    def ep(self) -> int:
        """The expert-parallel group size in effect (1 without expert parallelism)."""
        if not self.expert_parallel:
            return 1
        return self.ep_size or self.npus_total


@dataclass(frozen=True)
class KvPoolSpec:
    """The prefix-cache pool every engine reaches through AscendStoreConnector (docs/ascend-pd-launch-facts.md §3).

    backend mooncake: mooncake_master on `node` (rpc_port, metrics_port) and a mooncake.json per engine node.
    backend memcache: MemCache's MetaService on `node` (rpc_port = meta_service_url, config_store_port,
    metrics_port = its metrics_url) with mmc-meta.conf, and an mmc-local.conf per engine node.
    """

    node: str
    backend: str = "mooncake"
    rpc_port: int = 50088  # memcache: 5000
    metrics_port: int = 9003  # memcache: 8000
    config_store_port: int = 6000  # memcache only
    segment_size: str = "1GB"  # per die: mooncake global_segment_size, memcache local_service.dram.size
    protocol: str | None = None  # memcache: device_sdma | device_rdma (mooncake on NPUs is always "ascend")
    install_path: str | None = None  # memcache: the site-packages holding memcache_hybrid (config/, lib/)
    load_failure_policy: str | None = None  # kv_load_failure_policy; None leaves vLLM's default (fail)
    consumer_is_to_load: bool = False  # Decode instances also load prefix blocks from the pool
    consumer_is_to_put: bool = False  # Decode instances also put blocks (MLA models)
    # mooncake.json prefer_alloc_in_same_node: true (the guide's value) keeps a Prefill's blocks in its own segment,
    # so they die with it; false spreads them, so another Prefill can load a dead one's prefix (simcluster/README.md).
    prefer_local: bool = True


@dataclass(frozen=True)
class StoreServer:
    node: str
    port: int


@dataclass(frozen=True)
class StoreSpec:
    """launch_profile sim only: the memcached ring that stands in for MemCache (kv_pool backend memcache)."""

    servers: tuple[StoreServer, ...]
    replicas: int = 1
    memory_mb: int = 64


@dataclass(frozen=True)
class KvEventsSpec:
    """cache_aware's exact view (pdproxy/README.md "Cache-aware routing", docs/kv-events.md): every Prefill engine
    publishes its KV cache events (vLLM --kv-events-config) on tcp://*:port + its global DP rank, and answers replay
    requests on replay_port + rank (None: no replay socket); the proxy subscribes to each. Absent: off. Port 0:
    tcp://*:0, a port each engine picks on its node's address (VLLM_HOST_IP), which the proxy asks the engine for
    at GET /kv_event_sources (pdproxy --kv-events HOST:PORT=discover)."""

    port: int = 5557  # vLLM's default endpoint tcp://*:5557
    replay_port: int | None = None


@dataclass(frozen=True)
class ProxySpec:
    node: str
    port: int = 8000
    admin_port: int = 8001  # the admin API's own listener, on 127.0.0.1 of the proxy node; parse defaults it to port + 1
    policy: str = "round_robin"
    hash_key: str | None = None  # consistent_hash only: request_id | client_ip
    workers: int | str = "auto"  # pdproxy --workers: N serving processes, or auto (from the proxy host's cores)
    kv_events: KvEventsSpec | None = None  # cache_aware only: route by the Prefills' KV cache events


@dataclass(frozen=True)
class BenchClientSpec:
    node: str


@dataclass(frozen=True)
class TransferPortsSpec:
    """Where Mooncake's transfer engine binds its random ADXL ports on every P/D node.

    Ports base + die * per_device ... are taken at run time, so no kv_port window may fall in
    [base, base + npu_count * per_device). per_device is 100 from Mooncake v0.3.9 on (what the tutorials build)
    and 1000 in v0.3.7.post2: set it to 1000 on such clusters and the validator demands kv_port >= 36000 on
    16-die nodes. An instance's ASCEND_BASE_PORT env overrides base, as in Mooncake.
    """

    base: int = 20000
    per_device: int = 100


@dataclass(frozen=True)
class SimulationSpec:
    """What the simulated model answers (launch_profile sim only): questions of a named answer book, right for the
    share `accuracy` of them by a fixed rule (simcluster/engine/answers.py), with a made-up <think> part if `think`."""

    answer_book: str
    accuracy: float = 1.0
    think: bool = False


# Where a plan's processes run (docs/containers.md): `host` = as the launch profile runs them (processes over SSH;
# MindIE: Kubernetes); `container` = each engine in a container (`docker run` / `podman run`, as vllm-ascend's guides
# start its image: docs/container-launch-facts.md).
SPEC_RUNTIMES = ("host", "container")
CONTAINER_ENGINES = ("docker", "podman")
CONTAINER_PROFILES = ("vllm-ascend", "sim")  # whose engines a container runtime can run (engines_in_containers)


@dataclass(frozen=True)
class ContainerSpec:
    """runtime: container only. The image is one of the cluster allowlist's images; mounts are names from its
    `mounts` list (docs/cluster-allowlist.md): a topology picks among what the admin set, it never adds one."""

    image: str  # <repository>:<tag>
    digest: str = ""  # sha256:<64 hex>; "" = the allowlist's digest for that image, if it lists one
    engine: str = "docker"  # docker | podman
    mounts: tuple[str, ...] = ()
    shm_size: str = "1g"  # the guide's --shm-size=1g (docs/container-launch-facts.md §1.3)


MINDIE_HARDWARE = ("800I_A2", "800I_A3")  # user_config.json deploy_config.hardware_type


@dataclass(frozen=True)
class MindieSchedule:
    """BackendConfig.ScheduleConfig of one role's servers (None = MindIE's own default, left out of the file)."""

    max_prefill_batch_size: int | None = None  # maxPrefillBatchSize
    max_prefill_tokens: int | None = None  # maxPrefillTokens
    max_batch_size: int | None = None  # maxBatchSize
    max_iter_times: int | None = None  # maxIterTimes


@dataclass(frozen=True)
class MindieSpec:
    """launch_profile mindie only (docs/mindie.md): where MindIE's Kubernetes deploy scripts run and what
    user_config.json says beyond what the instances already say. The proxy block names the coordinator's node and
    its predict (port) and manage (admin_port) ports; MindIE's coordinator replaces pdproxy."""

    deploy_host: str  # the node that runs deploy_ac_job.py, kubectl and delete.sh
    scripts_dir: str  # MindIE's kubernetes_deploy_scripts directory on deploy_host
    job_id: str = "mindie"  # deploy_config.job_id, also the Kubernetes namespace
    image_name: str = ""  # one of the cluster allowlist's images (by reference); rendered pinned
    hardware_type: str | None = None  # None = from the Prefill nodes' hardware
    weight_mount_path: str | None = None  # None = model.path
    max_seq_len: int | None = None  # ModelDeployConfig.maxSeqLen; None = the instances' max_model_len or 8192
    max_input_token_len: int | None = None  # ModelDeployConfig.maxInputTokenLen
    prefill: MindieSchedule = MindieSchedule()
    decode: MindieSchedule = MindieSchedule()
    ready_timeout_s: int = 1800  # how long a deploy waits for the coordinator's ready line
    # Any other user_config.json field, deep-merged over the rendered file; it may not change a rendered field.
    extra: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class TopologySpec:
    model: ModelSpec
    instances: tuple[InstanceSpec, ...]
    proxy: ProxySpec
    kv_pool: KvPoolSpec | None = None
    store: StoreSpec | None = None
    bench_client: BenchClientSpec | None = None
    launch_profile: str = "vllm-ascend"
    run_dir: str = DEFAULT_RUN_ROOT["vllm-ascend"]  # workdir; logs/ and pids/ below it on every node (normalised)
    transfer_ports: TransferPortsSpec = TransferPortsSpec()
    simulation: SimulationSpec | None = None
    kv_connector: str = "pull"  # KV_CONNECTORS
    mindie: MindieSpec | None = None
    runtime: str = "host"  # SPEC_RUNTIMES
    container: ContainerSpec | None = None  # runtime: container only

    def instance(self, name: str) -> InstanceSpec:
        return next(i for i in self.instances if i.name == name)
