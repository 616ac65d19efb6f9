"""Reading one Prometheus `/metrics` target and extracting what the topology picture shows, as pure functions.

Parsing is prometheus_client's, of the lines each reader uses (READS: of a vLLM engine's 366 lines, 77 go to the
library; the proxy's P×D edge counters are read by a strict line pattern, with the library as the fallback); a
name an extractor reads must be in its Reads, or it reads as absent. Every way a target can fail (refused, timeout,
HTTP error, not UTF-8, not the exposition format, none of the expected metrics) becomes a TargetReading with a
status and a reason, never an exception, so one bad target never costs the readings of the others. A body that is
some other format (an HTML error page, a JSON answer) says which it looks like.

Engines: vLLM's names (vllm/v1/metrics/loggers.py), with the older ones as fallbacks (gpu_cache_usage_perc,
gpu_prefix_cache_*, time_per_output_token_seconds); prefix-cache counters count tokens. Newer vLLM also counts the
KV connector's (the pool's) lookups as vllm:external_prefix_cache_queries/hits. mooncake_master: its master_*
families (docs/ascend-pd-launch-facts.md §3); older masters leave zero-valued series out, so a missing family
reads as 0 and a master with none at all is idle, not garbled.
"""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property

import urllib3
from prometheus_client.parser import text_string_to_metric_families

CONNECT_TIMEOUT_S = 1.0
READ_TIMEOUT_S = 2.0
MAX_BYTES = 8 << 20  # a metrics page bigger than this is not one we understand

OK, UNREACHABLE, GARBLED = "ok", "unreachable", "garbled"

# sample name -> list of (labels, value); NaN and infinite values are dropped as "not measured".
Samples = dict[str, list[tuple[dict[str, str], float]]]


class ExpositionError(ValueError):
    pass


@dataclass
class TargetReading:
    key: str            # the Process key (p0-dp0, proxy, kv-pool)
    role: str
    url: str
    status: str = OK
    reason: str = ""
    scrape_ms: float = 0.0
    values: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"key": self.key, "role": self.role, "url": self.url, "status": self.status, "reason": self.reason,
                "scrape_ms": round(self.scrape_ms, 1), "values": self.values}


# --- transport -------------------------------------------------------------------------------------------------

_http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
                            maxsize=4)


def fetch_text(url: str) -> str:
    """The body of GET url as text; ConnectionError with a short reason when it cannot be had."""
    try:
        resp = _http.request("GET", url, preload_content=False, redirect=False,
                             headers={"Accept": "text/plain;version=0.0.4"})
    except urllib3.exceptions.NewConnectionError as exc:  # before its base class, ConnectTimeoutError
        raise ConnectionError(f"connection failed: {_root_cause(exc)}") from None
    except urllib3.exceptions.ConnectTimeoutError:
        raise ConnectionError(f"connect timeout after {CONNECT_TIMEOUT_S:g} s") from None
    except urllib3.exceptions.ReadTimeoutError:
        raise ConnectionError(f"read timeout after {READ_TIMEOUT_S:g} s (no answer)") from None
    except urllib3.exceptions.HTTPError as exc:
        raise ConnectionError(_root_cause(exc)) from None
    try:
        if resp.status != 200:
            raise ConnectionError(f"HTTP {resp.status} from {url}")
        body = resp.read(MAX_BYTES + 1)
    except urllib3.exceptions.ReadTimeoutError:
        raise ConnectionError(f"read timeout after {READ_TIMEOUT_S:g} s") from None
    except urllib3.exceptions.HTTPError as exc:
        raise ConnectionError(f"read failed: {_root_cause(exc)}") from None
    finally:
        resp.release_conn()
    if len(body) > MAX_BYTES:
        raise ExpositionError(f"larger than {MAX_BYTES >> 20} MiB")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ExpositionError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _root_cause(exc: BaseException) -> str:
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    text = str(exc)
    return text.split(": ", 1)[-1] if "Errno" in text else text or type(exc).__name__


# --- parsing ---------------------------------------------------------------------------------------------------

def _looks_like(text: str) -> str | None:
    """What a body that is no exposition seems to be, from its first characters."""
    head = text.lstrip("\ufeff \t\r\n")[:200].lower()
    if head.startswith(("<!doctype html", "<html", "<head", "<body")) or "<html" in head:
        return "HTML"
    if head.startswith("<?xml") or head.startswith("<"):
        return "XML/HTML"
    if head.startswith(("{", "[")):
        return "JSON"
    return None


def parse_exposition(text: str, reads: Reads | None = None) -> Samples:
    """Samples by name (a counter `x` appears as `x_total`, a histogram as `x_count`/`x_sum`/`x_bucket`), and every
    declared family name, with no samples if none were exposed yet. With `reads`, only what a reader uses is
    parsed (see Reads); without, the whole page."""
    kind = _looks_like(text)
    if kind:
        first = text.strip().splitlines()[0][:80] if text.strip() else ""
        raise ExpositionError(f"not Prometheus text (looks like {kind}: {first!r})")
    split = _split_page(text, reads) if reads is not None else None
    if split is None:
        return _parse_library(text)
    rest, strict = split
    out = _parse_library(rest)
    for name, rows in strict.items():
        out.setdefault(name, []).extend(rows)
    return out


def _parse_library(text: str) -> Samples:
    out: Samples = defaultdict(list)
    try:
        for family in text_string_to_metric_families(text):
            out.setdefault(family.name, [])  # declared but not yet observed (a fresh engine) still counts as known
            for s in family.samples:
                if isinstance(s.value, float | int) and math.isfinite(s.value):
                    out[s.name].append((dict(s.labels), float(s.value)))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ExpositionError(f"not Prometheus text: {str(exc)[:160]}") from None
    return dict(out)


# --- what each reader uses: the rest of a page is dropped before it is parsed ----------------------------------

_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


@dataclass(frozen=True)
class Reads:
    """The sample names a reader uses (`names`, and every name starting with one of `prefixes`): only their lines
    and `# TYPE` lines go to prometheus_client. A line whose name cannot be told at a glance is kept. `marker`:
    the prefix the reader looks for to tell its exporter's page; a page with none of it kept is parsed whole, so
    the reader says what it would have. `pairs`: counters labelled exactly `prefill`/`decode` (the proxy's P×D
    edges), read by a strict line pattern; a line of theirs that does not fit sends the whole page to the library.
    What the filter changes: a damaged line of a family no reader uses no longer fails the target."""

    names: frozenset[str]
    marker: str
    prefixes: tuple[str, ...] = ()
    pairs: frozenset[str] = frozenset()

    @cached_property
    def families(self) -> frozenset[str]:
        """The names `# TYPE` lines give a family read through the library: a sample name or its stem."""
        return _with_stems(self.names - self.pairs) - self.pair_families

    @cached_property
    def pair_families(self) -> frozenset[str]:
        return _with_stems(self.pairs)

    @cached_property
    def pair_line(self):
        """A whole line of a `pairs` counter: name, then prefill/decode labels in either order, unescaped, one space,
        a value without `_` (which prometheus_client refuses and float() takes), nothing after it."""
        names = "|".join(re.escape(n) for n in sorted(self.pairs)) or "(?!)"
        return re.compile(rf'({names})\{{(?:prefill="([^"\\]*)",decode="([^"\\]*)"|decode="([^"\\]*)",'
                          rf'prefill="([^"\\]*)")\}} ([^\s_]+)').fullmatch


def _with_stems(names: frozenset[str]) -> frozenset[str]:
    return names | {n[: -len(sfx)] for n in names for sfx in _SUFFIXES if n.endswith(sfx)}


def _histogram(name: str) -> set[str]:
    return {f"{name}_count", f"{name}_sum", f"{name}_bucket"}


ENGINE_READS = Reads(marker="vllm:", names=frozenset({
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
    "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    *_histogram("vllm:time_to_first_token_seconds"), *_histogram("vllm:inter_token_latency_seconds"),
    *_histogram("vllm:time_per_output_token_seconds"),
    "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total",
    "vllm:external_prefix_cache_queries_total", "vllm:external_prefix_cache_hits_total",
    "vllm:num_preemptions_total", "vllm:request_success_total",
    "simcluster:store_blocks_total", "simcluster:kv_transfer_model_bytes_total"}))
EDGE_COUNTERS = frozenset({"pdproxy_edge_requests_total", "pdproxy_edge_prompt_tokens_total"})
PROXY_READS = Reads(marker="pdproxy_", pairs=EDGE_COUNTERS, names=EDGE_COUNTERS | {
    "pdproxy_backend_requests_total", "pdproxy_backend_inflight", "pdproxy_backend_healthy", "pdproxy_backend_state",
    "pdproxy_requests_total", "pdproxy_time_to_first_token_seconds_count", "pdproxy_time_to_first_token_seconds_sum"})
# pool_values counts every master_* series; its segments come from two families of their own.
POOL_READS = Reads(marker="master_", prefixes=("master_",),
                   names=frozenset({"segment_total_capacity_bytes", "segment_allocated_bytes"}))

def _split_page(text: str, reads: Reads) -> tuple[str, Samples] | None:
    """The lines of `text` the library is to parse, and the samples of `reads.pairs` read here; None: parse it whole."""
    names, prefixes, marker = reads.names, reads.prefixes, reads.marker
    families, pair_families, pair_line = reads.families, reads.pair_families, reads.pair_line
    kept: list[str] = []
    strict: Samples = {}
    marked = False
    for line in text.split("\n"):
        m = pair_line(line)
        if m is not None:
            name, p, d, d2, p2, value = m.groups()
            try:
                v = float(value)
            except ValueError:
                return None
            if math.isfinite(v):
                strict.setdefault(name, []).append(({"prefill": p, "decode": d} if p is not None else
                                                    {"decode": d2, "prefill": p2}, v))
            marked = marked or name.startswith(marker)
            continue
        if line[:1] == "#":
            parts = line.split(None, 3)  # HELP lines and other comments are dropped: they are documentation only
            if len(parts) > 2 and parts[1] == "TYPE" and parts[2] not in pair_families and (
                    parts[2] in families or parts[2].startswith(prefixes) or parts[2][:1] == '"'):
                kept.append(line)
                marked = marked or parts[2].startswith(marker)
            continue
        if not line or line[0] in " \t{":
            kept.append(line)  # blank, indented, or a name inside the braces: the library decides
            continue
        head = line.partition("{")[0]
        name = head.split(None, 1)[0] if " " in head or "\t" in head else head
        if name in pair_families:
            return None  # a line of a pair counter that the strict pattern does not take
        if name in names or name + "_total" in names or name.startswith(prefixes):
            kept.append(line)
            marked = marked or name.startswith(marker)
    return ("\n".join(kept), strict) if marked else None


def _total(samples: Samples, name: str, **labels) -> float | None:
    rows = [v for lab, v in samples.get(name, ()) if all(lab.get(k) == x for k, x in labels.items())]
    return sum(rows) if rows else None


def _max(samples: Samples, name: str) -> float | None:
    rows = [v for _, v in samples.get(name, ())]
    return max(rows) if rows else None


def _by_label(samples: Samples, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = {}
    get = out.get
    for lab, v in samples.get(name, ()):
        key = tuple([lab.get(k, "") for k in keys])
        out[key] = get(key, 0.0) + v
    return out


def _buckets(samples: Samples, histogram: str) -> dict[str, float]:
    """A histogram's cumulative buckets summed over its other labels (DP ranks), by `le` as exposed ("+Inf"); a
    bucket whose bound is no number is left out."""
    out: dict[str, float] = defaultdict(float)
    for lab, v in samples.get(f"{histogram}_bucket", ()):
        if _is_bound(lab.get("le")):
            out[lab["le"]] += v
    return dict(out)


def _is_bound(le: str | None) -> bool:
    try:
        return le is not None and not math.isnan(float(le))
    except ValueError:
        return False


def engine_values(samples: Samples) -> dict:
    """A vLLM (or simulated) engine process: sums over its `engine` (DP rank) labels, KV usage the worst rank.
    Histograms keep count, sum and cumulative buckets so means and quantiles can be taken over the window
    between two scrapes."""
    if not any(name.startswith("vllm:") for name in samples):
        raise ExpositionError("no vllm: metrics in the exposition")
    kv_usage = _max(samples, "vllm:kv_cache_usage_perc")
    if kv_usage is None:
        kv_usage = _max(samples, "vllm:gpu_cache_usage_perc")  # the name before vLLM 0.9
    itl = "vllm:inter_token_latency_seconds"
    if f"{itl}_count" not in samples:
        itl = "vllm:time_per_output_token_seconds"
    kv_recv = _by_label(samples, "simcluster:kv_transfer_model_bytes_total", "peer", "direction")
    prefix = "vllm:prefix_cache"
    if f"{prefix}_queries_total" not in samples and "vllm:gpu_prefix_cache_queries_total" in samples:
        prefix = "vllm:gpu_prefix_cache"  # the name before vLLM 0.9
    success = _by_label(samples, "vllm:request_success_total", "finished_reason")
    blocks = _by_label(samples, "simcluster:store_blocks_total", "tier", "op")
    return {
        "running": _total(samples, "vllm:num_requests_running"),
        "waiting": _total(samples, "vllm:num_requests_waiting"),
        "kv_usage": kv_usage,
        "prompt_tokens": _total(samples, "vllm:prompt_tokens_total"),
        "generation_tokens": _total(samples, "vllm:generation_tokens_total"),
        "ttft_count": _total(samples, "vllm:time_to_first_token_seconds_count"),
        "ttft_sum": _total(samples, "vllm:time_to_first_token_seconds_sum"),
        "itl_count": _total(samples, f"{itl}_count"),
        "itl_sum": _total(samples, f"{itl}_sum"),
        "ttft_buckets": _buckets(samples, "vllm:time_to_first_token_seconds"),
        "itl_buckets": _buckets(samples, itl),
        # Tokens looked up in / found in the engine's own prefix cache, and through the KV connector (the pool).
        "prefix_queries": _total(samples, f"{prefix}_queries_total"),
        "prefix_hits": _total(samples, f"{prefix}_hits_total"),
        "external_queries": _total(samples, "vllm:external_prefix_cache_queries_total"),
        "external_hits": _total(samples, "vllm:external_prefix_cache_hits_total"),
        "preemptions": _total(samples, "vllm:num_preemptions_total"),
        "success": {reason: v for (reason,), v in sorted(success.items())},
        # simcluster only: KV blocks each tier (mooncake pool, ascendstore ring) supplied (load) or took (backup).
        "store_blocks": [{"tier": t, "op": o, "blocks": v} for (t, o), v in sorted(blocks.items())],
        # Only simcluster exports these (vllm-ascend's Mooncake connectors register no metrics).
        "kv_transfer_model_bytes": [{"peer": p, "direction": d, "bytes": v} for (p, d), v in sorted(kv_recv.items())],
    }


def proxy_values(samples: Samples) -> dict:
    if not any(name.startswith("pdproxy_") for name in samples):
        if "request_received_total" in samples:
            return coordinator_values(samples)
        raise ExpositionError("no pdproxy_ metrics in the exposition")
    reqs = _by_label(samples, "pdproxy_edge_requests_total", "prefill", "decode")
    toks = _by_label(samples, "pdproxy_edge_prompt_tokens_total", "prefill", "decode")
    legs = _by_label(samples, "pdproxy_backend_requests_total", "role", "backend")
    inflight = _by_label(samples, "pdproxy_backend_inflight", "role", "backend")
    healthy = _by_label(samples, "pdproxy_backend_healthy", "role", "backend")
    states = {(lab.get("role", ""), lab.get("backend", "")): lab.get("state", "")
              for lab, v in samples.get("pdproxy_backend_state", ()) if v == 1}
    backends = sorted(set(legs) | set(inflight) | set(healthy) | set(states))
    return {
        "edges": [{"prefill": pair[0], "decode": pair[1], "requests": reqs.get(pair, 0.0),
                   "prompt_tokens": toks.get(pair, 0.0)} for pair in sorted(reqs.keys() | toks.keys())],
        "backends": [{"role": r, "backend": b, "requests": legs.get((r, b), 0.0), "inflight": inflight.get((r, b)),
                      "healthy": healthy.get((r, b)) == 1 if (r, b) in healthy else None, "state": states.get((r, b))}
                     for r, b in backends],
        "requests": _total(samples, "pdproxy_requests_total"),
        "ttft_count": _total(samples, "pdproxy_time_to_first_token_seconds_count"),
        "ttft_sum": _total(samples, "pdproxy_time_to_first_token_seconds_sum"),
    }


def coordinator_values(samples: Samples) -> dict:
    """MindIE's coordinator (docs/mindie.md): its request and TTFT totals; it names no P/D pair per request, so the
    picture draws no per-edge flow for it."""
    return {"edges": [], "backends": [], "requests": _total(samples, "request_received_total"),
            "ttft_count": _total(samples, "time_to_first_token_seconds_count"),
            "ttft_sum": _total(samples, "time_to_first_token_seconds_sum")}


OTHER_EXPORTERS = (("vllm:", "a vLLM engine's"), ("pdproxy_", "the PD proxy's"))


def pool_values(samples: Samples) -> dict:
    """mooncake_master. A family it does not show is 0 (older masters omit zero-valued series); none at all is an
    idle master, unless the page is plainly another exporter's."""
    if not any(name.startswith("master_") for name in samples):
        for prefix, whose in OTHER_EXPORTERS:
            if any(name.startswith(prefix) for name in samples):
                raise ExpositionError(f"{whose} metrics, not mooncake_master's (no master_* families)")

    def total(*names: str) -> float:
        for name in names:
            value = _total(samples, name)
            if value is not None:
                return value
        return 0.0

    # Per key, the master counts existence checks (AscendStoreConnector's lookup: batch_is_exist; it checks before
    # putting too), replica-list requests (a load: a batch counts its keys, as items where the master counts them
    # apart; a failure found nothing) and put starts. Which looked-up block was a hit it cannot say: the hit rate
    # is the Prefill engines' (vllm:external_prefix_cache_*).
    lookups = total("master_exist_key_requests_total") + total(
        "master_batch_exist_key_items_total", "master_batch_exist_key_requests_total")
    gets = total("master_get_replica_list_requests_total") + total(
        "master_batch_get_replica_list_items_total", "master_batch_get_replica_list_requests_total")
    failed = total("master_get_replica_list_failures_total") + total(
        "master_batch_get_replica_list_failed_items_total", "master_batch_get_replica_list_failures_total")
    puts = total("master_put_start_requests_total") + total(
        "master_batch_put_start_items_total", "master_batch_put_start_requests_total")
    # Every store client lends the pool one segment, named `<its host>:<port>`: what each host lends and holds.
    capacities = _by_label(samples, "segment_total_capacity_bytes", "segment")
    allocated = _by_label(samples, "segment_allocated_bytes", "segment")
    hosts: dict[str, dict] = {}
    for (segment,), capacity in sorted(capacities.items()):
        host = hosts.setdefault(segment.rsplit(":", 1)[0], {"segments": 0, "allocated_bytes": 0.0, "total_bytes": 0.0})
        host["segments"] += 1
        host["allocated_bytes"] += allocated.get((segment,), 0.0)
        host["total_bytes"] += capacity
    capacity, clients = total("master_total_capacity_bytes"), total("master_active_clients")
    series = sum(len(rows) for name, rows in samples.items() if name.startswith("master_"))
    empty = ("" if capacity else "no segment mounted: "
             + ("the page has no master_* series (an older master leaves zero values out)" if not series
                else f"{clients:.0f} store clients connected, none lends memory" if clients
                else "no engine's store client has joined this master"))
    return {
        "key_count": total("master_key_count"),
        "allocated_bytes": total("master_allocated_bytes"),
        "total_bytes": capacity,
        "active_clients": clients,
        # None: a master that names no segment though it has capacity (an older one); else how many are mounted.
        "segments": sum(h["segments"] for h in hosts.values()) if hosts or not capacity else None,
        "segment_hosts": hosts,
        "empty_reason": empty,
        "lookups": lookups, "loads": max(0.0, gets - failed), "load_failures": failed, "puts": puts,
        "evicted_keys": total("master_evicted_key_count"),
        # 0: the page had no master_* sample at all (an idle older master; or a newer one not yet serving).
        "master_series": series,
    }


READS = {"prefill": ENGINE_READS, "decode": ENGINE_READS, "proxy": PROXY_READS, "kv_pool": POOL_READS}
EXTRACTORS = {"prefill": engine_values, "decode": engine_values, "proxy": proxy_values, "kv_pool": pool_values}


def read_target(key: str, role: str, url: str, *, fetch=fetch_text) -> TargetReading:
    """GET, parse and extract one target; every failure is a status with a reason."""
    reading = TargetReading(key=key, role=role, url=url)
    started = time.perf_counter()
    try:
        reading.values = EXTRACTORS[role](parse_exposition(fetch(url), READS.get(role)))
    except ConnectionError as exc:
        reading.status, reading.reason = UNREACHABLE, str(exc) or "unreachable"
    except ExpositionError as exc:
        reading.status, reading.reason = GARBLED, str(exc)
    except Exception as exc:  # noqa: BLE001 - a surprise in one target must not cost the others
        reading.status, reading.reason = GARBLED, f"{type(exc).__name__}: {str(exc)[:160]}"
    reading.scrape_ms = (time.perf_counter() - started) * 1000
    return reading
