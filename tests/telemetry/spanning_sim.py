"""A deployment on the simulated cluster with instances over two nodes each and a Mooncake pool, and requests that
share a prefix: shared by the telemetry test of it and the browser test that draws it."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

PREFIX = " ".join(f"word{i}" for i in range(600))  # many KV blocks


def spanning(data: dict) -> None:
    """On the reference topology: p0 TP16 x DP2 internal over node0 and node1 (node1 headless; p1 goes), d0 TP4 x
    DP8 external over node2 and node3 (d1 goes); the Decode loads from the pool too."""
    data["instances"] = [i for i in data["instances"] if i["name"] in ("p0", "d0")]
    p0, d0 = data["instances"]
    del p0["node"], d0["node"]
    p0.update(nodes=["node0", "node1"], dp=2, dp_style="internal", dp_rpc_port=13356)
    d0.update(nodes=["node2", "node3"], dp=8)
    data["kv_pool"]["consumer_is_to_load"] = True


def complete(proxy: str, prompt: str, *, model: str = "qwen3-235b") -> None:
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 4}).encode()
    request = urllib.request.Request(f"{proxy}/v1/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{proxy} answered {exc.code}: {exc.read().decode(errors='replace')[:500]}") from None


def share_a_prefix(deployment, scrape) -> dict:
    """One request puts a long prefix in the pool (waiting, by scrape rounds, until the master holds its keys),
    three more find it there; returns the last round."""
    from apps.deployments.models import Process

    proxy = Process.objects.get(deployment=deployment, key="proxy")
    url = f"http://{proxy.address}:{proxy.ports[0]}"
    complete(url, PREFIX + " first")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the Prefill puts its blocks after answering
        time.sleep(0.5)
        if scrape()["services"]["kv-pool"]["key_count"]:
            break
    for i in range(3):
        complete(url, PREFIX + f" again {i}")
    time.sleep(0.3)
    return scrape()
