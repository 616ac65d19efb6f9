"""The layerwise PD flow (`--pd-flow layerwise`, vllm-ascend's MooncakeLayerwiseConnector): Decode first, and the
Prefill when the Decode asks for it (docs/ascend-pd-launch-facts.md §2.6).

1. The client's request goes to a Decode with kv_transfer_params {do_remote_decode: false, do_remote_prefill: true,
   metaserver: "http://<advertised host>:<port>/v1/metaserver/<token>"}: each Decode attempt (Handoff) gets its own
   unguessable token, which only that Decode leg carries (the connector POSTs to the URL as given).
2. The Decode allocates the prompt's blocks and POSTs its own kv_transfer_params to that URL, naming its request
   id: vLLM's "chatcmpl-<X-Request-Id>", or "cmpl-<X-Request-Id>-0" for a completion.
3. The call is taken only when its token is one a request of this proxy waits for, it comes from a host of the
   Decode that leg was sent to (the Decode's own host, and the nodes --decode-hosts adds for it), names that
   request's id, and names one of those hosts as remote_host (where the Prefill will push the KV). Any other call is
   refused (403) and goes nowhere; one without a known token is a 404. The X-Request-Id is the client's: matching
   calls by request id alone let any client post params for its own, or a guessed, request and have a Prefill push
   a prompt's KV wherever it named.
4. A taken call sends the request (max_tokens 1, as in the pull flow) with those params to a Prefill, under the same
   X-Request-Id: the Prefill pushes the KV layer by layer into the Decode, then answers. The call is answered once
   the Prefill has: {"status": "ok"}, or the Prefill leg's error.
5. The Decode decodes, and its answer goes to the client as in the pull flow (exchange.py).

Retries: a Prefill that fails is replaced by another for the same waiting Decode; a Prefill leg that runs out of
instances ends the Decode leg (it would wait for KV that never comes) and the client gets that error. A Decode that
refused the connection is replaced with the same request id and token (the handoff then expects the new Decode);
one that failed after taking the request gets a new id (`-rN`) and token on the next Decode, which calls the
metaserver again. A token is forgotten once its attempt ends, and is never shown to the client.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
import time

from .config import host_key, is_ip, parse_decode_hosts
from .errors import Answer
from .exchange import Exchange
from .jsonfast import loads
from .leg_bodies import decode_body, prefill_body
from .legs import DECODE, Leg, LegRules, NeedPrefill, judge_decode_head, prompt_tokens, read_whole_done

log = logging.getLogger("pdproxy.layerwise")

METASERVER_PATH = "/v1/metaserver"
TOKEN_BYTES = 24  # secrets.token_urlsafe: 32 URL-safe characters, 192 random bits
TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
NO_TOKEN = ("a metaserver call must use the URL its request was given (the Decode leg's kv_transfer_params "
            f"metaserver, {METASERVER_PATH}/<token>)")
UNKNOWN_TOKEN = ("unknown metaserver URL: no request of this proxy waits for a call there (a call must use the URL "
                 "its request was given; the request may have ended)")


async def judge_pushed(leg: Leg, ex, lease):
    """A layerwise Prefill's answer, read whole; 2xx means its push is over (it returns no kv_transfer_params).
    Judged: (instance, prompt tokens)."""
    raw = await lease.conn.read_body(ex.remaining())
    read_whole_done(leg, ex, lease, raw)
    try:
        answer = loads(raw)[0]
    except (ValueError, UnicodeDecodeError):
        answer = None
    return lease.backend, prompt_tokens(answer)


PUSHING_PREFILL = LegRules("prefill", judge_pushed, excludes=lambda failure: True, loses_kv=lambda failure: False)
WAITING_DECODE = LegRules("decode", judge_decode_head, excludes=DECODE.excludes, loses_kv=DECODE.loses_kv)


def decode_request_id(endpoint: str, rid: str) -> str:
    """The id vLLM gives the Decode's request (and the connector sends the metaserver) for X-Request-Id `rid`."""
    return f"chatcmpl-{rid}" if endpoint == "/v1/chat/completions" else f"cmpl-{rid}-0"


def prompt_count(body: dict) -> int:
    """Requests vLLM makes of a completion's prompt: one per string or token list in a list of them."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and not all(isinstance(t, int) for t in prompt):
        return len(prompt)
    return 1


class Handoff:
    """One Decode attempt waiting for its metaserver call, and the Prefill leg that call starts."""

    __slots__ = ("ex", "body", "rid", "request_id", "token", "url", "decode", "refused", "prefill", "settled")

    def __init__(self, ex, body: dict, rid: str, base_url: str):
        self.ex = ex
        self.body = body
        self.rid = rid  # X-Request-Id of both legs: the Prefill's request id must match the Decode's
        self.request_id = decode_request_id(ex.endpoint, rid)
        self.token = new_token(ex.flow.link)  # in the Decode leg's metaserver URL only
        self.url = f"{base_url}/{self.token}"
        self.decode = None  # the Decode backend the leg was last sent to (one that refused the connection is replaced)
        self.refused = False  # a call with this token was refused (the timeout message says so)
        self.prefill: asyncio.Task | None = None
        self.settled = ex.flow.loop.create_future()  # the Prefill leg's outcome: None, or the Answer it failed with

    def sent_to(self, backend):
        """Leg.serve's `picked`: the Decode this attempt's payload goes to now."""
        self.decode = backend

    def settle(self, outcome: Answer | None):
        if not self.settled.done():
            self.settled.set_result(outcome)

    def start(self, params: dict, fast: bool) -> asyncio.Future:
        """The first metaserver call starts the Prefill leg; a repeated call waits for the same one."""
        if self.prefill is None and not self.settled.done():
            self.prefill = self.ex.flow.loop.create_task(self.ex.prefill_for(self, params, fast))
        return self.settled


def new_token(link) -> str:
    """An unguessable token; with --workers N, `<worker index>.<token>`, so that a call reaching another worker is
    handed to this one alone (token_worker)."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    return token if link is None else f"{link.index}.{token}"


def token_worker(token: str) -> int | None:
    """The worker a well-formed `<index>.<token>` names, else None (nothing to forward)."""
    index, sep, rest = token.partition(".")
    if not (sep and index.isascii() and index.isdigit() and len(index) <= 3 and len(rest) <= 64
            and TOKEN_CHARS.issuperset(rest)):
        return None
    return int(index)


def _shown(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class Metaserver:
    """`POST /v1/metaserver/<token>`: the Decodes' calls, matched by token to the Decode attempts waiting for them
    and checked against the Decode each was sent to."""

    def __init__(self, flow):
        self.flow = flow
        self.pending: dict[str, Handoff] = {}  # by token
        self.decode_hosts = parse_decode_hosts(flow.cfg.decode_hosts, flow.cfg.decode)  # addr -> more host keys
        self._hosts: dict[str, frozenset[str]] = {}  # Decode addr -> every host key it may call from (names resolved)
        self.listening(flow.cfg.port)

    def listening(self, port: int):
        """The URL the Decodes are given (with a token each), once the port is known (`--port 0` picks one)."""
        host = self.flow.cfg.advertise_host or self.flow.cfg.host
        host = f"[{host}]" if ":" in host else host
        self.url = f"http://{host}:{port}{METASERVER_PATH}"

    def expect(self, ex, body: dict, rid: str) -> Handoff:
        handoff = Handoff(ex, body, rid, self.url)
        self.pending[handoff.token] = handoff
        return handoff

    def forget(self, handoff: Handoff):
        if self.pending.get(handoff.token) is handoff:
            del self.pending[handoff.token]
        if handoff.prefill is not None and not handoff.prefill.done():
            handoff.prefill.cancel()  # the client went away, or the Decode it pushed to failed
        handoff.settle(Answer(502, f"request {handoff.rid} ended before its Prefill finished (client gone or its "
                                   f"Decode failed)", "BadGatewayError", "prefill_cancelled"))

    async def handle(self, req, conn):
        if req.method != "POST":
            conn.send_error(405, f"use POST on {METASERVER_PATH}/<token>", "MethodNotAllowed")
            return
        token = req.path[len(METASERVER_PATH) + 1:]
        if not token:
            self.unknown(conn, NO_TOKEN)
            return
        await self.answer(token, req.client_ip, req.body, conn, forwarded=False)

    def unknown(self, conn, message: str):
        self.flow.metrics.metaserver_calls.labels("none").value += 1
        self.flow.metrics.error("metaserver_unknown")
        conn.send_error(404, message, "NotFoundError")

    async def answer(self, token: str, caller: str, raw: bytes, conn, forwarded: bool):
        """A call to /v1/metaserver/<token> from `caller` (its TCP peer address). forwarded: from another worker of
        --workers N, through the supervisor, which asks the worker the token names (token_worker)."""
        handoff = self.pending.get(token)
        if handoff is None:
            if forwarded:
                conn.send_error(404, UNKNOWN_TOKEN, "NotFoundError")
                return
            link = self.flow.link
            holder = token_worker(token) if link is not None else None
            if holder is not None and holder != link.index:
                await link.forward_metaserver(holder, token, caller, raw, conn)
                if conn.status_sent != 404:
                    return
            self.unknown(conn, UNKNOWN_TOKEN)
            return
        try:
            params, fast = loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            conn.send_error(400, f"malformed JSON body: {exc}", "BadRequestError")
            return
        metrics = self.flow.metrics
        refusal = await self.refusal(handoff, caller, params)
        if refusal is not None:
            handoff.refused = True
            metrics.metaserver_calls.labels("refused").value += 1
            metrics.error("metaserver_refused")
            log.warning("refused a metaserver call for request %s from %s: %s", handoff.request_id, caller or "?",
                        refusal)
            conn.send_error(403, f"metaserver call refused: {refusal}", "PermissionDeniedError")
            return
        metrics.metaserver_calls.labels("other_worker" if forwarded else "this_worker").value += 1
        outcome = await asyncio.shield(handoff.start(params, fast))
        if outcome is None:
            conn.send_response(200, b'{"status": "ok"}')
        else:
            conn.send_error(outcome.status, f"prefill for {handoff.request_id} failed: {outcome.message}",
                            outcome.err_type or "BadGatewayError")

    async def refusal(self, handoff: Handoff, caller: str, params) -> str | None:
        """Why this call may not start its request's Prefill leg, or None: it must come from a host of the Decode
        the leg was sent to, name the request's id, and name one of those hosts as where the KV goes."""
        if not isinstance(params, dict):
            return "the body is not a JSON object"
        decode = handoff.decode
        if decode is None:
            return "its request was sent to no Decode yet"
        hosts = await self.hosts_of(decode)
        shown = f"decode {decode.addr} ({', '.join(sorted(hosts))}; --decode-hosts adds a Decode's other nodes)"
        if host_key(caller) not in hosts:
            return f"the caller {caller or '?'} is not a host of the request's {shown}"
        request_id = params.get("request_id")
        if request_id != handoff.request_id:
            return f"request_id {_shown(request_id)} is not the request's ({handoff.request_id})"
        remote = params.get("remote_host")
        if not isinstance(remote, str) or host_key(remote) not in hosts:
            return f"remote_host {_shown(remote)} is not a host of the request's {shown}"
        return None

    async def hosts_of(self, decode) -> frozenset[str]:
        """The hosts (host_key form) a Decode's calls may come from and name: its own host and --decode-hosts' for
        it, host names resolved once (a name that does not resolve is tried again on the next call)."""
        hosts = self._hosts.get(decode.addr)
        if hosts is not None:
            return hosts
        keys, complete = set(), True
        for name in (decode.host, *self.decode_hosts.get(decode.addr, ())):
            key = host_key(name)
            keys.add(key)
            if is_ip(key):
                continue
            try:
                infos = await self.flow.loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
            except OSError as exc:
                log.warning("cannot resolve %s, a host of decode %s: %s", name, decode.addr, exc)
                complete = False
                continue
            keys.update(host_key(info[4][0]) for info in infos)
        hosts = frozenset(keys)
        if complete:
            self._hosts[decode.addr] = hosts
        return hosts


class LayerwiseExchange(Exchange):
    """One client request through the layerwise flow; the answer side (run, forward, recompute) is Exchange's."""

    __slots__ = ("tokens",)

    def __init__(self, flow, req, conn, endpoint: str, body: dict, fast: bool = False):
        super().__init__(flow, req, conn, endpoint, body, fast)
        self.prefill_leg.rules = PUSHING_PREFILL
        self.decode_leg.rules = WAITING_DECODE
        self.tokens: list[str] = []  # of this request's handoffs: kept out of what the client is told

    async def through_pd(self, body: dict, rid: str, use):
        try:
            return await self._through_pd(body, rid, use)
        except Answer as ans:
            raise self.without_tokens(ans) from None

    async def _through_pd(self, body: dict, rid: str, use):
        flow = self.flow
        if prompt_count(body) != 1:
            raise Answer(400, "the layerwise flow serves one prompt per request", "BadRequestError", "bad_request")
        max_retries = flow.cfg.max_retries
        prefill, decode = self.prefill_leg, self.decode_leg
        raw = self.req.body if body is self.body else None  # the client's bytes, spliced into the Decode's body
        attempt = 0
        while True:
            # both roles checked before anything is sent: the Decode would take the request and wait for KV
            if not prefill.can_pick():
                raise prefill.exhausted()
            if not decode.can_pick():
                raise decode.exhausted()
            handoff = flow.layerwise.expect(self, body, rid if attempt == 0 else f"{rid}-r{attempt}")
            self.tokens.append(handoff.token)
            kv = {"do_remote_decode": False, "do_remote_prefill": True, "metaserver": handoff.url}
            try:
                return await self.decode_with(handoff, decode_body(raw, body, kv, self.fast), use)
            except NeedPrefill as exc:
                attempt += 1
                if decode.attempts > max_retries or prefill.attempts > max_retries:
                    raise self.retries_spent(str(exc)) from None
            finally:
                flow.layerwise.forget(handoff)

    def without_tokens(self, ans: Answer) -> Answer:
        """The answer with this request's tokens blanked out (a Decode's error may quote the body it was sent); by
        then each is forgotten, but a token is never shown."""
        for token in self.tokens:
            if token in ans.message:
                ans.message = ans.message.replace(token, "<token>")
            if ans.body is not None and token.encode() in ans.body:
                ans.body = ans.body.replace(token.encode(), b"<token>")
        return ans

    async def decode_with(self, handoff: Handoff, payload: bytes, use):
        """The Decode leg, ended early when the Prefill leg fails: the Decode would wait for KV that never comes."""

        async def after_head(lease, dconn):
            await self.prefilled(handoff)
            p, tokens = self.decode_leg.kv_from
            self.flow.metrics.edge(p.addr, lease.backend.addr, tokens)
            return await use(lease, dconn)

        leg = self.flow.loop.create_task(self.decode_leg.serve(self, payload, handoff.rid, after_head,
                                                               handoff.sent_to))
        try:
            await asyncio.wait((leg, handoff.settled), return_when=asyncio.FIRST_COMPLETED)
            if not leg.done() and handoff.settled.result() is not None:
                raise handoff.settled.result()
            return await leg
        finally:
            if not leg.done():
                leg.cancel()

    async def prefilled(self, handoff: Handoff):
        """Until the Prefill has pushed: the Decode may answer its head before (vLLM opens a stream at once)."""
        if not handoff.settled.done():
            try:
                await asyncio.wait_for(asyncio.shield(handoff.settled), self.first_byte_timeout())
            except TimeoutError:
                why = ("a metaserver call for it was refused; the proxy's log says why" if handoff.refused else
                       f"did the Decode call {self.flow.layerwise.url}/<token>?")
                raise Answer(504, f"no Prefill pushed KV for {handoff.request_id} within the first-byte timeout "
                                  f"({why})", "GatewayTimeoutError", "prefill_timeout") from None
        failure = handoff.settled.result()
        if failure is not None:
            raise failure

    async def prefill_for(self, handoff: Handoff, params: dict, fast: bool):
        """The Prefill leg one metaserver call starts: the request with the Decode's params, one token."""
        metrics = self.flow.metrics
        t0 = time.perf_counter()
        outcome = Answer(502, f"internal proxy error in the Prefill leg of {handoff.rid}", "BadGatewayError",
                         "prefill_garbage")
        try:
            p, tokens = await self.prefill_leg.serve(self, prefill_body(handoff.body, self.fast and fast, params),
                                                     handoff.rid)
            metrics.observe(metrics.prefill_duration, self.endpoint, time.perf_counter() - t0)
            self.decode_leg.kv_from = (p, tokens)
            outcome = None
        except Answer as ans:
            outcome = ans
        finally:
            handoff.settle(outcome)
