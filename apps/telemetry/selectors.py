"""Reading a deployment's live state back from Redis, in the shape the topology picture draws."""

from __future__ import annotations

import time

from django.core.cache import cache

HISTORY_LEN = 60          # rounds kept for sparklines: 5 minutes at one round every 5 s
LIVE_TTL_S = 120          # no round for this long (beat stopped, processes stopped): the state disappears
STALE_AFTER_S = 15        # three missed rounds: shown, but marked stale


def live_key(deployment_id: int) -> str:
    return f"telemetry:live:{deployment_id}"


def history_key(deployment_id: int) -> str:
    return f"telemetry:history:{deployment_id}"


def live_view(state: dict, history: list[dict], *, now: float | None = None) -> dict:
    """The `live` section of the topology snapshot (also the websocket payload)."""
    now = time.time() if now is None else now
    age = max(0.0, now - state["at"])
    return {
        "at": state["at"], "age_s": round(age, 1), "stale": age > STALE_AFTER_S, "interval_s": state["interval_s"],
        "kv_bytes_per_token": state["kv_bytes_per_token"],
        "instances": state["instances"], "edges": state["edges"], "services": state["services"],
        "pool": state.get("pool"),  # rounds stored before the pool summary existed have none
        "targets": [{k: t[k] for k in ("key", "role", "url", "status", "reason", "scrape_ms")} for t in state["targets"]],
        "history": {
            "at": [h["at"] for h in history],
            "instances": {name: {field: [h["instances"].get(name, {}).get(field) for h in history]
                                 for field in ("kv_usage", "running", "waiting", "prompt_tok_s", "gen_tok_s")}
                          for name in state["instances"]},
            "edges": {e: [h["edges"].get(e) for h in history] for e in state["edges"] if e.startswith("kv_transfer:")},
        },
    }


def deployment_live(deployment_id: int) -> dict | None:
    """The live section for a deployment, or None when nothing was scraped lately."""
    got = cache.get_many([live_key(deployment_id), history_key(deployment_id)])
    state = got.get(live_key(deployment_id))
    if state is None:
        return None
    return live_view(state, got.get(history_key(deployment_id)) or [])
