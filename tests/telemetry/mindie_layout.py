"""The MindIE seed layout of the Ascend article on 16-die A3 nodes, for the snapshot and browser tests: 4 Prefill
instances of 2 servers each and 1 Decode instance of 8 servers, a Mooncake pool and the proxy on a node of their own;
and two scrape rounds of it with pool traffic, made by the real live_state from engine and master readings."""

from __future__ import annotations

P_NODES = [f"p-srv{i}" for i in range(8)]
D_NODES = [f"d-srv{i}" for i in range(8)]
SVC = "svc"


def mindie_yaml() -> str:
    """p0, p1: TP8 x DP4 external over 2 servers; p2, p3: TP8 x DP4 internal (the second server headless);
    d0: TP2 x DP64 external over 8 servers."""
    lines = ["launch_profile: vllm-ascend", "run_dir: /var/lib/pdcp/mindie", "model:", "  path: /models/m",
             "  served_name: m",
             "  profile: {layers: 61, kv_heads: 1, head_dim: 576, dtype: bfloat16, attention_heads: 128}",
             "instances:"]
    for i in range(4):
        style = "external" if i < 2 else "internal"
        lines.append(f"  - {{name: p{i}, role: prefill, nodes: [{P_NODES[2 * i]}, {P_NODES[2 * i + 1]}], tp: 8, "
                     f"dp: 4, dp_style: {style}, dp_rpc_port: 13356, api_port: 7100, kv_port: 36000}}")
    lines.append(f"  - {{name: d0, role: decode, nodes: [{', '.join(D_NODES)}], tp: 2, dp: 64, dp_style: external, "
                 "dp_rpc_port: 13356, api_port: 7100, kv_port: 36200}")
    lines += [f"kv_pool: {{backend: mooncake, node: {SVC}, rpc_port: 50088, metrics_port: 9003}}",
              f"proxy: {{node: {SVC}, port: 1999}}", f"bench_client: {{node: {SVC}}}"]
    return "\n".join(lines) + "\n"


def create_nodes(cluster, credential, *, npus: bool = False) -> None:
    from apps.inventory.models import Node, Npu

    for i, name in enumerate(P_NODES + D_NODES):
        node = Node.objects.create(cluster=cluster, name=name, address=f"127.0.12.{i + 1}", credential=credential,
                                   npu_count=16, hardware_model="Atlas 800I A3")
        if npus:
            Npu.objects.bulk_create(
                Npu(node=node, npu_id=d // 2, chip_id=d % 2, logical_id=d, name="Ascend910", health="OK",
                    hbm_used_mb=20000 + 2500 * ((d + i) % 16), hbm_total_mb=65536) for d in range(16))
    Node.objects.create(cluster=cluster, name=SVC, address="127.0.12.100", credential=credential, npu_count=0)


def _engine(prompt, gen, *, prefix, ext=None, blocks=None, running=4, kv=0.4):
    return {"running": running, "waiting": 1, "kv_usage": kv, "prompt_tokens": prompt, "generation_tokens": gen,
            "ttft_count": prompt / 1000, "ttft_sum": prompt / 1000 * 0.3, "itl_count": gen, "itl_sum": gen * 0.03,
            "prefix_queries": prefix[0], "prefix_hits": prefix[1],
            "external_queries": ext[0] if ext else None, "external_hits": ext[1] if ext else None,
            "preemptions": 0.0, "success": {"stop": prompt / 1000, "length": 1.0}, "kv_transfer_model_bytes": [],
            "store_blocks": [{"tier": "mooncake", "op": op, "blocks": n} for op, n in (blocks or {}).items()]}


def live_rounds(at: float) -> list[dict]:
    """Two rounds 5 s apart: every Prefill head and the Decode master scraped, the pool busy."""
    from apps.telemetry.live import TargetInfo, live_state
    from apps.telemetry.scrape import TargetReading

    heads = {"p0": "p0-dp0", "p1": "p1-dp0", "p2": "p2", "p3": "p3", "d0": "d0-dp0"}
    targets = [TargetInfo(key, "decode" if inst == "d0" else "prefill", inst, "127.0.12.1", 7100, "u")
               for inst, key in heads.items()]
    targets.append(TargetInfo("kv-pool", "kv_pool", "", "127.0.12.100", 50088, "u"))
    rounds = []
    for k in range(2):
        readings = []
        for i, (inst, key) in enumerate(heads.items()):
            scale = (k + 1) * (1 + i)
            if inst == "d0":
                values = _engine(0, 4000 * scale, prefix=(0, 0), running=120, kv=0.62)
            else:
                values = _engine(20000 * scale, 20 * scale, prefix=(20000 * scale, 6000 * scale),
                                 ext=(14000 * scale, 7000 * scale + 1400 * k * i),
                                 blocks={"load": 300 * scale, "backup": 150 * scale})
            readings.append(TargetReading(key, "decode" if inst == "d0" else "prefill", "u", values=values))
        readings.append(TargetReading("kv-pool", "kv_pool", "u", values={
            "key_count": 48000 + 1000 * k, "allocated_bytes": 310e9 + 5e9 * k, "total_bytes": 512e9,
            "active_clients": 40, "lookups": 90000 + 8000 * k, "loads": 60000 + 3100 * k, "load_failures": 0,
            "puts": 50000 + 1500 * k,
            "evicted_keys": 0, "master_series": 60}))
        rounds.append(live_state(deployment_id=0, at=at - 5 * (1 - k), targets=targets, readings=readings,
                                 kv_bytes_per_token=70_272, previous=rounds[-1] if rounds else None))
    return rounds
