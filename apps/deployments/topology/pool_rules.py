"""Rules on the KV pool and what only a real engine or only the simulator has: the memcached `store` ring stands in
for MemCache on the simulated cluster alone; a memcache pool names where memcache_hybrid lives on the nodes; an
explicit engine_id is unique (vllm-ascend asserts `Conflict engine id`, docs/ascend-pd-launch-facts.md §1.4)."""

from __future__ import annotations

from .problem import Problem, instance_path
from .spec import TopologySpec


def pool_rules(spec: TopologySpec, out: list[Problem]) -> None:
    pool = spec.kv_pool
    if spec.store and spec.launch_profile == "vllm-cpu":
        pass  # cpu_rules.py says why, with that profile's fix
    elif spec.store and spec.launch_profile != "sim":
        out.append(Problem("store", "store starts plain memcached, which no vllm-ascend engine reads: the pool real "
                           "engines use is AscendStoreConnector's", "remove store and set kv_pool.backend: memcache "
                           "(MemCache's MetaService) or mooncake"))
    elif spec.store and (pool is None or pool.backend != "memcache"):
        out.append(Problem("store", "store is the simulated cluster's stand-in for MemCache's pool, but kv_pool is "
                           f"{'absent' if pool is None else 'backend ' + pool.backend}",
                           "set kv_pool.backend: memcache, or remove store"))
    if pool and pool.backend == "memcache" and not pool.install_path:
        out.append(Problem("kv_pool.install_path", "the memcache backend reads its config and libraries below "
                           "memcache_hybrid's install path on every node", "set install_path to the Location "
                           "`pip show memcache_hybrid` prints, e.g. /usr/local/lib/python3.11/site-packages"))
    if pool and (pool.consumer_is_to_load or pool.consumer_is_to_put) and not any(
            i.role == "decode" for i in spec.instances):
        out.append(Problem("kv_pool.consumer_is_to_load", "consumer_is_to_load/put set but no decode instance",
                           "remove them, or add a decode instance"))
    seen: dict[str, str] = {}
    for inst in spec.instances:
        if inst.engine_id is None:
            continue
        if inst.engine_id in seen:
            out.append(Problem(instance_path(spec, inst, "engine_id"), f"{inst.name}: engine_id {inst.engine_id!r} "
                               f"is also {seen[inst.engine_id]}'s; vllm-ascend stops with `Conflict engine id`",
                               "give every instance its own engine_id, or leave it out to have one generated"))
        seen.setdefault(inst.engine_id, inst.name)
