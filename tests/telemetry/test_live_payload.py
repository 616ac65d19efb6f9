"""What a scrape round pushes to the topology page (selectors.push_view) and keeps in Redis: at 128 Prefill x 128
Decode (16,384 P->D pairs) the message stays well under daphne's 1 MiB limit, and it still carries what the page
draws: every instance's row, the KV flow per instance into/out of the fabric with its top peers, and the newest
sparkline point (the page appends it to the series the snapshot brought)."""

import json

from apps.telemetry.live import history_point
from apps.telemetry.selectors import (
    HISTORY_LEN,
    MESH_DETAIL_MAX_PAIRS,
    TOP_PEERS,
    history_entry,
    live_view,
    push_view,
)
from apps.telemetry.services import stored_state

DAPHNE_LIMIT = 1 << 20
P, D = 128, 128


def _instance(role: str, k: int) -> dict:
    return {"status": "ok", "reason": "", "role": role, "processes": 1, "reachable": 1, "running": 3.0 + k,
            "waiting": 1.0, "kv_usage": 0.123456789, "prompt_tok_s": 1234.56789 + k, "gen_tok_s": 98.7654321,
            "ttft_s": 0.0123456, "itl_s": 0.00456789, "ttft_p50_s": 0.01, "ttft_p99_s": 0.2, "itl_p50_s": 0.004,
            "itl_p99_s": 0.02, "prefix_hit_rate": 0.333333, "prefix_hit_rate_total": 0.25, "connector_hit_rate": None,
            "connector_hit_rate_total": None, "connector_hit_tok_s": None, "connector_hits": 12.0,
            "connector_queries": 40.0, "connector_hits_d": 1.0, "connector_queries_d": 4.0, "preemptions": 0.0,
            "preempt_s": 0.0, "success": {"stop": 123456.0, "length": 7.0}, "success_s": {"stop": 3.3333333},
            "store_blocks": {}}


def _edge(busy: bool, k: int) -> dict:
    rate = 0.5 + k % 7 if busy else 0.0
    return {"requests": 1000.0 + k, "prompt_tokens": 512000.0 + k, "req_s": rate, "prompt_tok_s": rate * 512,
            "kv_bytes_s": rate * 512 * 192_512, "source": "proxy", "engine_kv_bytes_s": None,
            "source_label": "proxy prompt tokens × 192,512 B/token (model profile)"}


def _state(at: float, *, prefills=P, decodes=D, busy_every=32) -> dict:
    instances = {f"p{i}": _instance("prefill", i) for i in range(prefills)}
    instances |= {f"d{i}": _instance("decode", i) for i in range(decodes)}
    edges = {f"kv_transfer:inst:p{i}->inst:d{j}": _edge((i * decodes + j) % busy_every == 0, j)
             for i in range(prefills) for j in range(decodes)}
    edges |= {f"request:proc:proxy->inst:p{i}": {"requests": 10.0, "req_s": 1.0} for i in range(prefills)}
    targets = [{"key": f"{n}-dp0", "role": i["role"], "url": f"http://127.0.0.1:1/{n}", "status": "ok", "reason": "",
                "scrape_ms": 3.2, "values": {}} for n, i in instances.items()]
    return {"deployment": 1, "at": at, "interval_s": 5.0, "kv_bytes_per_token": 192_512, "targets": targets,
            "instances": instances, "edges": edges, "services": {"proxy": {"status": "ok", "req_s": 64.0}},
            "pool": None, "health": {n: {"state": "healthy", "colour": "green", "label": "healthy", "since": at}
                                     for n in instances}}


def _size(x) -> int:
    return len(json.dumps({"type": "live", "live": x}, separators=(",", ":")))


def test_a_256_instance_round_pushes_well_under_the_websocket_limit():
    state = _state(1_700_000_000.25)
    push = push_view(state, history_point(state), now=state["at"] + 1)

    assert _size(push) < DAPHNE_LIMIT / 4, _size(push)
    assert push["aggregated"] and push["edges"] == {}  # 16,384 pairs: drawn per instance, not per pair
    assert "history" not in push and set(push["history_point"]["instances"]) == set(state["instances"])
    assert push["at"] == state["at"]  # times are never rounded
    p5 = push["instances"]["p5"]
    assert p5["prompt_tok_s"] == 1240.0 and p5["kv_usage"] == 0.1235 and p5["running"] == 8.0
    assert p5["success"] == {"stop": 123456.0, "length": 7.0}  # counts stay exact to the unit
    assert "ttft_p99_s" not in p5 and "connector_hits" not in p5  # not drawn


def test_the_fabric_sums_each_instances_busy_pairs_with_its_top_peers():
    state = _state(100.0)
    push = push_view(state, history_point(state), now=101.0)
    busy = {k: e for k, e in state["edges"].items() if k.startswith("kv_transfer:") and e["kv_bytes_s"]}
    out_of_p0 = {k.split("->inst:")[1]: e for k, e in busy.items() if k.startswith("kv_transfer:inst:p0->")}
    fabric = push["kv_fabric"]["p0"]["out"]
    assert fabric["pairs"] == len(out_of_p0) == D // 32
    assert fabric["kv_bytes_s"] == float(f"{sum(e['kv_bytes_s'] for e in out_of_p0.values()):.4g}")
    assert len(fabric["peers"]) == min(TOP_PEERS, len(out_of_p0))
    flows = [peer[1] for peer in fabric["peers"]]
    assert flows == sorted(flows, reverse=True) and flows[0] == float(f"{max(e['kv_bytes_s'] for e in out_of_p0.values()):.4g}")
    into = sum(1 for k in busy if k.endswith("->inst:d0"))
    assert push["kv_fabric"]["d0"]["in"]["pairs"] == into and "out" not in push["kv_fabric"]["d0"]


def test_the_served_snapshot_of_a_large_mesh_keeps_busy_pairs_and_no_pair_history():
    state = _state(100.0)
    history = [history_entry(history_point(_state(100.0 - 5 * k)), state["instances"]) for k in range(HISTORY_LEN)]
    assert all(h["edges"] == {} for h in history)  # Redis keeps no per-pair history of a large mesh
    view = live_view(stored_state(state), history, now=101.0)
    kv = [k for k in view["edges"] if k.startswith("kv_transfer:")]
    assert len(kv) == P * D // 32 and all(view["edges"][k]["kv_bytes_s"] for k in kv)
    assert view["history"]["edges"] == {} and len(view["history"]["instances"]["p0"]["prompt_tok_s"]) == HISTORY_LEN
    assert len(stored_state(state)["edges"]) == P * D // 32 + P  # the request legs stay
    assert _size(view) < 4 * DAPHNE_LIMIT


def test_a_small_mesh_pushes_its_busy_pairs_and_serves_all_of_them_with_history():
    state = _state(100.0, prefills=2, decodes=2, busy_every=2)
    assert 4 <= MESH_DETAIL_MAX_PAIRS
    push = push_view(state, history_point(state), now=101.0)
    assert not push["aggregated"]
    assert set(push["edges"]) == {"kv_transfer:inst:p0->inst:d0", "kv_transfer:inst:p1->inst:d0"}
    assert push["edges"]["kv_transfer:inst:p0->inst:d0"]["kv_bytes_s"] == float(f"{0.5 * 512 * 192_512:.4g}")
    view = live_view(stored_state(state), [history_point(state)], now=101.0)
    assert len([k for k in view["edges"] if k.startswith("kv_transfer:")]) == 4  # idle pairs too: served as before
    assert view["history"]["edges"]["kv_transfer:inst:p0->inst:d1"] == [0.0]
