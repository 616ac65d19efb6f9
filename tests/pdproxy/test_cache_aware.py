"""Cache-aware routing (issue 13 item 2, pdproxy/cache_aware.py): repeated prefixes go to the instance that holds
them, new ones to the emptiest, load out of balance wins over the cache, and what an instance holds is bounded."""

import concurrent.futures

import pytest

from pdproxy.backend_pool import HEALTHY, BackendPool
from pdproxy.cache_aware import CacheAware, PrefixStore, chunk_hashes
from tests.pdproxy.proxy_procs import completion

DOCS = {name: f"[{name}] " + f"the {name} document says something long " * 40 for name in ("alpha", "beta", "gamma")}


def pool_of(n: int) -> BackendPool:
    pool = BackendPool("prefill")
    for i in range(n):
        pool.add(f"127.0.0.1:{7100 + i}", state=HEALTHY)
    return pool


def test_chunk_hashes_are_equal_exactly_as_long_as_the_prefixes_are():
    a = chunk_hashes("x" * 300 + "tail one")
    b = chunk_hashes("x" * 300 + "tail two, which is longer than a chunk of sixty-four characters......")
    assert len(a) == 4 and a[:4] == b[:4] and len(b) == 5
    assert chunk_hashes("y" + "x" * 300)[0] != a[0] and chunk_hashes("short") == []


def test_a_prefix_store_forgets_its_least_recently_used_chunks_first():
    store = PrefixStore(capacity_chunks=4)
    shared, other = chunk_hashes("s" * 128), chunk_hashes("o" * 64 + "p" * 64 + "q" * 64)
    store.insert(shared)
    store.insert(other)  # 5 chunks for 4 places: the shared prefix's first chunk goes
    assert len(store) == 4 and store.match(shared) == 0 and store.match(other) == 3
    store.insert(shared)
    assert store.match(shared) == 2


def test_repeated_prefixes_stick_new_ones_spread_and_imbalance_overrides():
    pool = pool_of(3)
    policy = CacheAware(pool, balance_abs=2, balance_rel=1.0)
    first = {name: policy.pick(doc + " question 0", set()) for name, doc in DOCS.items()}
    assert len(set(first.values())) == 3  # each new document to the instance holding the least
    for i in range(1, 5):
        for name, doc in DOCS.items():
            assert policy.pick(doc + f" question {i}", set()) is first[name]
    assert policy.routed == {"cache": 12, "fewest": 3, "balance": 0}
    alpha = first["alpha"]
    assert policy.pick(DOCS["alpha"] + " again", {alpha}) is not alpha  # a tried instance is never picked
    alpha.inflight = 5  # loaded: 5 - 0 > 2 and 5 > 0 x 1.0
    chosen = policy.pick(DOCS["alpha"] + " under load", set())
    assert chosen is not alpha and policy.routed["balance"] == 1
    alpha.inflight = 0
    assert policy.pick(DOCS["alpha"] + " after", set()) is alpha  # its cache wins again


@pytest.mark.procs
def test_the_proxy_keeps_each_document_on_one_prefill_and_spreads_the_documents(cluster):
    ps = [cluster.backend(f"p{i}") for i in range(3)]
    d = cluster.backend("d1")
    proxy = cluster.proxy(ps, [d], "--prefill-policy", "cache_aware", "--decode-policy", "least_conn")
    for i in range(4):
        for doc in DOCS.values():
            assert proxy.post("/v1/completions", completion(prompt=doc + f" question {i}"))[0] == 200
    served = {}
    for p in ps:
        for r in p.stats()["requests"]:
            served.setdefault(r["prompt"].split("]")[0] + "]", set()).add(p.name)
    assert all(len(names) == 1 for names in served.values()), served
    assert len(set().union(*served.values())) == 3, served
    assert proxy.metric("pdproxy_cache_aware_picks_total", role="prefill", reason="fewest") == 3
    assert proxy.metric("pdproxy_cache_aware_picks_total", role="prefill", reason="cache") == 9
    assert proxy.metric("pdproxy_cache_aware_held_chars", role="prefill", backend=ps[0].addr) > 1000


@pytest.mark.procs
def test_a_loaded_instance_sheds_its_documents_requests_to_the_others(cluster):
    ps = [cluster.backend(f"p{i}") for i in range(2)]
    d = cluster.backend("d1")
    proxy = cluster.proxy(ps, [d], "--prefill-policy", "cache_aware", "--balance-abs-threshold", "2",
                          "--balance-rel-threshold", "1.0")
    assert proxy.post("/v1/completions", completion(prompt=DOCS["alpha"] + " warm"))[0] == 200
    holder = next(p for p in ps if p.stats()["requests"])
    holder.fault("slow_first_byte", seconds=1.0, legs=["prefill"])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda i: proxy.post("/v1/completions", completion(
            prompt=DOCS["alpha"] + f" burst {i}"))[0], range(8)))
    assert statuses == [200] * 8
    counts = {p.name: sum(1 for r in p.stats()["requests"] if "burst" in (r["prompt"] or "")) for p in ps}
    # the holder takes the burst until it has 3 more in flight than the other, which then gets the rest
    assert counts[holder.name] >= 3 and sum(counts.values()) == 8 and min(counts.values()) >= 1, counts
