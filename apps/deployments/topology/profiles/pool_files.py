"""The KV pool's config files, as the vllm-ascend KV pool guide writes them (docs/ascend-pd-launch-facts.md §3.2, §3.4):
mooncake.json for the Mooncake backend, mmc-meta.conf / mmc-local.conf for MemCache. Plain text, no Django."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ..spec import KvPoolSpec

MEMCACHE_WORLD_SIZE = 256  # "maximum number of LocalServices, including ones added later" (kv_pool.md Step 3.3)
DEFAULT_MEMCACHE_PROTOCOL = "device_sdma"  # A3 over HCCS, the reference cluster's hardware


def mooncake_json(pool: KvPoolSpec, pool_address: str) -> str:
    config = {
        "metadata_server": "P2PHANDSHAKE",
        "protocol": "ascend",  # mooncake_backend.py raises for anything else on NPUs
        "device_name": "",
        "master_server_address": f"{pool_address}:{pool.rpc_port}",
        "global_segment_size": pool.segment_size,
        "preferred_segment": False,
        "prefer_alloc_in_same_node": pool.prefer_local,
    }
    return json.dumps(config, indent=2) + "\n"


def memcache_lib_dir(pool: KvPoolSpec) -> str:
    return f"{pool.install_path}/memcache_hybrid/lib"


_CONF_KEY = re.compile(r"[a-z][a-z0-9_.]*")
_CONF_VALUE = re.compile(r"[^\x00-\x1f\x7f]*")


def _conf(lines: Mapping[str, str]) -> str:
    """`key = value` lines; a value that could end its line (and start another key) is refused, never written."""
    for key, value in lines.items():
        if not _CONF_KEY.fullmatch(key) or not isinstance(value, str) or not _CONF_VALUE.fullmatch(value):
            raise ValueError(f"{key!r} = {value!r} is not one line of a MemCache conf file")
    return "".join(f"{key} = {value}\n" for key, value in lines.items())


def mmc_meta_conf(pool: KvPoolSpec, address: str) -> str:
    return _conf({
        "ock.mmc.meta_service_url": f"tcp://{address}:{pool.rpc_port}",
        "ock.mmc.meta_service.config_store_url": f"tcp://{address}:{pool.config_store_port}",
        "ock.mmc.meta_service.metrics_url": f"http://{address}:{pool.metrics_port}",
        "ock.mmc.log_level": "info",
    })


def mmc_local_conf(pool: KvPoolSpec, meta_address: str, extra: Mapping[str, str]) -> str:
    return _conf({
        "ock.mmc.meta_service_url": f"tcp://{meta_address}:{pool.rpc_port}",
        "ock.mmc.local_service.config_store_url": f"tcp://{meta_address}:{pool.config_store_port}",
        "ock.mmc.log_level": "info",
        "ock.mmc.local_service.world_size": str(MEMCACHE_WORLD_SIZE),
        "ock.mmc.local_service.protocol": pool.protocol or DEFAULT_MEMCACHE_PROTOCOL,
        "ock.mmc.local_service.dram.size": pool.segment_size,
        **extra,
    })
