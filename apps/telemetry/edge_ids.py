"""The ids of the topology picture's boxes and edges. A box is `inst:<instance name>` or `proc:<process key>`; an edge
is `<kind>:<source>-><target>`. The snapshot's edges carry the id and the live state keys each edge's figures by
it, so both sides build it here; static/js/edge-ids.js builds the same in the browser."""

from __future__ import annotations

KV_TRANSFER = "kv_transfer"  # a Prefill -> Decode KV hand-over
_KV_PREFIX = f"{KV_TRANSFER}:"


def instance_end(name: str) -> str:
    return f"inst:{name}"


def process_end(key: str) -> str:
    return f"proc:{key}"


def edge_id(kind: str, source: str, target: str) -> str:
    return f"{kind}:{source}->{target}"


def kv_edge_id(prefill: str, decode: str) -> str:
    """The KV hand-over from Prefill instance `prefill` to Decode instance `decode`."""
    return edge_id(KV_TRANSFER, instance_end(prefill), instance_end(decode))


def is_kv_edge(edge: str) -> bool:
    return edge.startswith(_KV_PREFIX)


def kv_edge_instances(edge: str) -> tuple[str, str]:
    """(prefill, decode) of a KV hand-over's id."""
    source, _, target = edge.removeprefix(_KV_PREFIX).partition("->")
    return source.removeprefix(instance_end("")), target.removeprefix(instance_end(""))
