"""The Prefill and Decode legs of one client request, and the one retry loop both go through (Leg.serve).

A leg goes to one instance after another until one answers 2xx, within --max-retries extra attempts per role
over the whole request (re-prefills and recompute continuations included). What differs between the legs is
data, a LegRules (PREFILL, DECODE):
- the role (which pool and balancer), and how an answer is read and judged (judge);
- whether an instance that failed may be tried again for this request (excludes);
- whether a failure may have used up the KV the Prefill made (loses_kv): a Decode that got the request may
  have pulled and freed it, so going on needs a new Prefill (NeedPrefill). A Decode that refused the
  connection never saw it: the next Decode gets the same kv_transfer_params.
Nothing is retried once a byte has gone to the client: that happens in `use`, after judge, which the loop
does not catch.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .backend_pool import Backend, BackendPool
from .errors import Answer, gateway_failure, status_error_type
from .http_client import BackendError, build_post
from .jsonfast import loads
from .lease import BackendLease
from .leg_bodies import snippet

_NONE_TRIED = frozenset()  # until the first failure: no set made per leg


class NeedPrefill(Exception):
    """The Decode got the request and may have pulled (and freed) the KV; the next attempt needs a fresh Prefill."""


class LegFailure(Exception):
    """One attempt failed in a way another instance may not. kind: connect | timeout | reset | garbage (as in
    BackendError) or 5xx; `error` or `status` is what BackendPool.report_failure is told."""

    def __init__(self, kind: str, reason: str, error: BackendError | None = None, status: int = 0):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.error = error
        self.status = status


@dataclass(frozen=True)
class LegRules:
    """What differs between the Prefill and the Decode leg (see the module docstring)."""

    role: str
    judge: Callable[..., Awaitable]  # judge(leg, exchange, lease): read and check an answer whose head came
    excludes: Callable[[LegFailure], bool]
    loses_kv: Callable[[LegFailure], bool]


class Leg:
    """One role's attempts for one client request. One class for both roles (the rules are data), which also
    keeps the retry loop's attribute accesses monomorphic for the interpreter."""

    __slots__ = ("rules", "role", "pool", "balancer", "key", "tried", "attempts", "last", "kv_from")

    def __init__(self, pool: BackendPool, balancer, rules: LegRules, key: str | dict | None = None):
        self.rules = rules
        self.key = key  # what the balancer is handed: the hash key, or the request body for cache_aware
        self.role = rules.role
        self.pool = pool
        self.balancer = balancer
        self.tried: frozenset | set[Backend] = _NONE_TRIED  # not to be picked again for this request
        self.attempts = 0
        self.last: tuple[str, str] | None = None  # (reason, kind) of the last failure
        self.kv_from: tuple[Backend, int] | None = None  # Decode: the Prefill whose KV it carries, prompt tokens

    async def serve(self, ex, payload: bytes, rid: str, use=None, picked=None):
        """Attempts until an instance answers 2xx; returns what the rules' judge made of the answer, or, with
        `use`, use(lease, judged): it runs while that instance is still leased and nothing it raises is
        retried. `picked(backend)` is told each instance before the payload goes to it."""
        flow = ex.flow
        judge = self.rules.judge
        while self.attempts <= flow.cfg.max_retries:
            b = self.balancer.pick(self.key, self.tried, ex.session)
            if b is None:
                break
            if self.attempts:
                flow.metrics.retry(self.role)
            self.attempts += 1
            if picked is not None:
                picked(b)
            request = build_post(ex.path, b.host_header, payload, rid.encode(), ex.auth)
            lease = BackendLease(b, ex.load)
            async with lease:
                try:
                    await lease.send(flow.loop, flow.cfg.connect_timeout, request, ex.first_byte_timeout)
                    judged = await judge(self, ex, lease)
                except BackendError as exc:
                    failure = LegFailure(exc.kind, f"{self.role} {b.addr}: {exc.reason}", error=exc)
                except LegFailure as exc:
                    failure = exc
                else:
                    self.pool.report_success(b)
                    flow.metrics.backend(self.role, b.addr, "ok")
                    return judged if use is None else await use(lease, judged)
            self.failed(flow.metrics, b, failure)
        raise self.exhausted()

    def failed(self, metrics, b: Backend, failure: LegFailure):
        self.pool.report_failure(b, failure.error, failure.status)
        metrics.backend(self.role, b.addr, failure.kind)
        self.last = (failure.reason, failure.kind)
        if self.rules.excludes(failure):
            if self.tried is _NONE_TRIED:
                self.tried = set()
            self.tried.add(b)
        if self.rules.loses_kv(failure):
            raise NeedPrefill(failure.reason)

    def can_pick(self) -> bool:
        """Whether an instance of this role could take the request now (healthy and not excluded for it)."""
        available, tried = self.pool.available(), self.tried
        if tried is _NONE_TRIED:  # the first attempt: no set to look in
            return bool(available)
        return any(b not in tried for b in available)

    def exhausted(self) -> Answer:
        if self.last is None:
            return Answer(503, self.pool.why_unavailable(), "ServiceUnavailableError", f"no_{self.role}")
        reason, kind = self.last
        status, err_type = gateway_failure(kind)
        return Answer(status, f"no {self.role} instance could serve the request; last error: {reason}", err_type,
                      f"{self.role}_{kind}")

    def refused(self, ex, b: Backend, conn, raw: bytes, unread: str = ""):
        """An answer of 400 or more: a 5xx is a failure another instance may not have; a 4xx is the request's
        own fault and goes to the client as it is (status and body). `unread`: why its body could not be read
        (then the client gets an error of ours naming the status)."""
        status = conn.status
        said = f"its body could not be read ({unread})" if unread else snippet(raw)
        if status >= 500:
            raise LegFailure("5xx", f"{self.role} {b.addr} answered HTTP {status}: {said}", status=status)
        ex.flow.metrics.backend(self.role, b.addr, "4xx")
        if unread:
            raise Answer(status, f"{self.role} {b.addr} answered HTTP {status}: {said}", status_error_type(status),
                         f"{self.role}_4xx")
        raise Answer(status, "", "", f"{self.role}_4xx", body=raw,
                     content_type=conn.headers.get("content-type", b"application/json"))


def read_whole_done(leg: Leg, ex, lease: BackendLease, raw: bytes) -> None:
    """An answer read whole: its connection goes back; one of 400 or more is refused (Leg.refused)."""
    conn = lease.conn  # done() lets the lease go of it
    lease.done()
    if conn.status >= 400:
        leg.refused(ex, lease.backend, conn, raw)


def prompt_tokens(answer) -> int:
    """usage.prompt_tokens of an answer, 0 when it has none."""
    usage = answer.get("usage") if isinstance(answer, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else 0
    return tokens if isinstance(tokens, int) else 0


# Where the Decode pulls the KV from: what both vLLM's NixlConnector and vllm-ascend's MooncakeConnectorV1 return.
REMOTE_FIELDS = ("remote_engine_id", "remote_block_ids", "remote_host", "remote_port")


async def judge_prefill(leg: Leg, ex, lease: BackendLease) -> tuple[Backend, dict, int]:
    """The answer is read whole; judged: (instance, kv_transfer_params, prompt tokens)."""
    b = lease.backend
    raw = await lease.conn.read_body(ex.remaining())
    read_whole_done(leg, ex, lease, raw)
    try:
        answer, ex.kv_fast = loads(raw)
        kv = answer["kv_transfer_params"]
        if not isinstance(kv, dict):
            raise TypeError("kv_transfer_params is not an object")
        missing = [f for f in REMOTE_FIELDS if kv.get(f) is None] if kv.get("do_remote_prefill") else []
        if missing:  # a real vLLM Decode given these dies (its NixlConnector asserts), taking every request with it
            raise KeyError(f"do_remote_prefill without {', '.join(missing)}")
    except (ValueError, KeyError, TypeError) as exc:
        raise LegFailure("garbage", f"prefill {b.addr} answered 200 without usable kv_transfer_params "
                         f"({type(exc).__name__}: {exc}): {snippet(raw)}", status=502) from None
    return b, kv, prompt_tokens(answer)


async def refuse_decode(leg: Leg, ex, lease: BackendLease):
    """A Decode answered 400 or more: its (short) body is read for the error, then Leg.refused."""
    conn = lease.conn  # read_whole lets the lease go of it
    try:
        # a 4xx goes to the client: the whole budget, as judge_prefill's (uvicorn writes an error's head and body
        # apart, and a busy engine host can take seconds between them); a 5xx only names why we fail over
        budget = ex.remaining() if conn.status < 500 else min(5.0, ex.remaining())
        raw = await lease.read_whole(budget)
    except BackendError as exc:
        leg.refused(ex, lease.backend, conn, b"", unread=exc.reason)
    leg.refused(ex, lease.backend, conn, raw)


async def judge_decode_head(leg: Leg, ex, lease: BackendLease):
    """Only the head is read; judged: the open connection, its body still to come (see Leg.serve's `use`)."""
    if lease.conn.status >= 400:
        await refuse_decode(leg, ex, lease)
    return lease.conn


async def judge_decode(leg: Leg, ex, lease: BackendLease):
    """As judge_decode_head (no coroutine more on the hot path), and the KV hand-over counted on its Prefill ->
    Decode edge."""
    if lease.conn.status >= 400:
        await refuse_decode(leg, ex, lease)
    p, tokens = leg.kv_from
    ex.flow.metrics.edge(p.addr, lease.backend.addr, tokens)
    return lease.conn


PREFILL = LegRules("prefill", judge_prefill, excludes=lambda failure: True, loses_kv=lambda failure: False)
DECODE = LegRules(
    "decode", judge_decode,
    # a Decode's 5xx is often the Prefill's fault (it died holding the KV): the re-prefill may use any Decode,
    # within the retry budget
    excludes=lambda failure: failure.kind != "5xx",
    loses_kv=lambda failure: failure.kind != "connect",
)
