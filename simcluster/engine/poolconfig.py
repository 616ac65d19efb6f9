"""The KV pool backends' own configuration, read as vllm-ascend reads it at engine start.

Mooncake (vllm_ascend/.../ascend_store/backend/mooncake_backend.py, MooncakeStoreConfig.load_from_env):
  MOONCAKE_CONFIG_PATH (required) names a JSON file; MOONCAKE_MASTER overrides its master_server_address and
  MOONCAKE_GLOBAL_SEGMENT_SIZE its global_segment_size. Sizes are ints (bytes) or strings "1GB", "512MB", "64KB",
  "4096B", "4096" (units 1024-based, decimals allowed). protocol must be "ascend" (NotImplementedError otherwise);
  enable_ssd_offload needs an absolute ssd_offload_path. The messages below are vllm-ascend's (and Python's for a
  missing file or bad JSON). The simulator also needs metadata_server "P2PHANDSHAKE" (what the docs render, the
  only mode simulated) and a master address HOST:PORT.
Memcache (memcache_backend.py): MMC_LOCAL_CONFIG_PATH (required) names a `key = value` file (`#`, `;` comments).
  MemCache itself cannot run here: its pool is a memcached ring (simcluster/ascendstore.py) named by the sim-only
  keys `simcluster.ring = host:port,...` and `simcluster.replicas = N` (default 3, at most the ring's size); without
  simcluster.ring, ock.mmc.meta_service_url's host:port is one memcached server.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from simcluster.engine.kvconfig import KVConfigError

GIB = 1 << 30
MIB = 1 << 20
DEFAULT_SEGMENT = GIB  # DEFAULT_GLOBAL_SEGMENT_SIZE
DEFAULT_LOCAL_BUFFER = GIB  # DEFAULT_LOCAL_BUFFER_SIZE
# The simulator registers a fraction of what the real engine registers (it must not allocate gigabytes per
# engine): SEGMENT_DIVISOR of global_segment_size, at most SIM_SEGMENT_CAP per engine process.
SEGMENT_DIVISOR = 16
SIM_SEGMENT_CAP = 64 * MIB
SIM_LOCAL_BUFFER_CAP = 16 * MIB
SIM_LOCAL_BUFFER_MIN = 4 * MIB
_SIZE_RE = re.compile(r"^\s*([\d.]+)\s*(gb|mb|kb|b)?\s*$")
_UNITS = {"gb": 1 << 30, "mb": 1 << 20, "kb": 1 << 10, "b": 1}


@dataclass(frozen=True)
class MooncakePool:
    path: str
    master: str  # host:port
    metadata_server: str
    global_segment_size: int  # what the real engine registers per die
    local_buffer_size: int
    preferred_segment: bool
    prefer_alloc_in_same_node: bool

    @property
    def sim_segment_size(self) -> int:
        return min(self.global_segment_size // SEGMENT_DIVISOR, SIM_SEGMENT_CAP)

    @property
    def sim_local_buffer(self) -> int:
        return max(SIM_LOCAL_BUFFER_MIN, min(self.local_buffer_size // SEGMENT_DIVISOR, SIM_LOCAL_BUFFER_CAP))


@dataclass(frozen=True)
class MemcachePool:
    path: str
    servers: list[str]
    replicas: int


def parse_size(value) -> int:
    """mooncake_backend._parse_global_segment_size: the same inputs give the same bytes or the same error."""
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        try:
            return int(value)
        except (TypeError, ValueError):
            raise KVConfigError(f"TypeError: Unsupported type for global_segment_size: {type(value)}") from None
    text = value.strip().lower()
    if not text:
        raise KVConfigError("ValueError: global segment size cannot be empty.")
    match = _SIZE_RE.match(text)
    if not match:
        raise KVConfigError(f"ValueError: Invalid format: '{value}'")
    try:
        number = float(match.group(1))
    except ValueError:
        raise KVConfigError(f"ValueError: Invalid numeric value '{match.group(1)}' in: '{value}'") from None
    try:
        return int(number * _UNITS[match.group(2) or "b"])
    except OverflowError:
        raise KVConfigError(f"ValueError: Storage size too large: '{value}'") from None


def _host_port(value, what: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9.\-]+:\d{1,5}", value.strip()):
        raise KVConfigError(f"simcluster: {what} must be HOST:PORT, got {value!r}")
    return value.strip()


def mooncake(env) -> MooncakePool:
    path = env.get("MOONCAKE_CONFIG_PATH")
    if not path:
        raise KVConfigError("ValueError: The environment variable 'MOONCAKE_CONFIG_PATH' is not set.")
    try:
        with open(path) as f:
            config = json.load(f)
    except FileNotFoundError:
        raise KVConfigError(f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'") from None
    except OSError as exc:
        raise KVConfigError(f"{type(exc).__name__}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise KVConfigError(f"json.decoder.JSONDecodeError: {exc}") from None
    if not isinstance(config, dict):
        raise KVConfigError(f"AttributeError: '{type(config).__name__}' object has no attribute 'get'")
    env_size = env.get("MOONCAKE_GLOBAL_SEGMENT_SIZE")
    segment = parse_size(env_size if env_size is not None else config.get("global_segment_size", DEFAULT_SEGMENT))
    local = parse_size(config.get("local_buffer_size", DEFAULT_LOCAL_BUFFER))
    protocol = config.get("protocol", "ascend")
    if config.get("enable_ssd_offload", False):
        ssd = config.get("ssd_offload_path", "")
        if not ssd:
            raise KVConfigError("ValueError: enable_ssd_offload is true but ssd_offload_path is empty. Set "
                                "ssd_offload_path in mooncake.json.")
        if not os.path.isabs(ssd):
            raise KVConfigError(f"ValueError: ssd_offload_path must be an absolute path, got: {ssd!r}")
    if protocol != "ascend":
        raise KVConfigError(f"NotImplementedError: MooncakeBackend does not support protocol {protocol!r}.")
    master = env.get("MOONCAKE_MASTER")
    master = master if master is not None else config.get("master_server_address")
    metadata = config.get("metadata_server")
    if metadata != "P2PHANDSHAKE":
        raise KVConfigError(f"simcluster: metadata_server {metadata!r} in {path}: only P2PHANDSHAKE is simulated "
                            "(and the Ascend docs render it)")
    return MooncakePool(path=path, master=_host_port(master, "master_server_address (or MOONCAKE_MASTER)"),
                        metadata_server=metadata, global_segment_size=segment, local_buffer_size=local,
                        preferred_segment=bool(config.get("preferred_segment", False)),
                        prefer_alloc_in_same_node=bool(config.get("prefer_alloc_in_same_node", True)))


def read_key_values(path: str) -> dict[str, str]:
    values = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip()
    return values


def memcache(env) -> MemcachePool:
    path = env.get("MMC_LOCAL_CONFIG_PATH")
    if not path:
        raise KVConfigError("ValueError: The environment variable 'MMC_LOCAL_CONFIG_PATH' is not set.")
    try:
        values = read_key_values(path)
    except FileNotFoundError:
        raise KVConfigError(f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KVConfigError(f"{type(exc).__name__}: {exc}") from None
    ring = values.get("simcluster.ring")
    if ring:
        servers = [_host_port(s, f"simcluster.ring entry in {path}") for s in ring.split(",") if s.strip()]
    else:
        url = values.get("ock.mmc.meta_service_url")
        if not url:
            raise KVConfigError(f"ValueError: ock.mmc.meta_service_url is not set in {path}")
        if not url.startswith("tcp://"):
            raise KVConfigError(f"ValueError: ock.mmc.meta_service_url must be tcp://IP:PORT, got {url!r}")
        servers = [_host_port(url[len("tcp://"):], f"ock.mmc.meta_service_url in {path}")]
    raw = values.get("simcluster.replicas", "3")
    if not raw.isdigit() or int(raw) < 1:
        raise KVConfigError(f"simcluster: simcluster.replicas must be a positive integer, got {raw!r} in {path}")
    if not servers:
        raise KVConfigError(f"simcluster: simcluster.ring in {path} names no server")
    return MemcachePool(path=path, servers=servers, replicas=min(int(raw), len(servers)))
