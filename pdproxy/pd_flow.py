"""The PD flow's shared parts (pools, balancers, metrics, recompute) and its client endpoints: the generate
endpoints, each request an Exchange (exchange.py; a LayerwiseExchange under --pd-flow layerwise), /v1/models, and
the layerwise flow's /v1/metaserver (layerwise.py)."""

from __future__ import annotations

import asyncio
import os

from .backend_pool import BackendPool
from .exchange import Exchange
from .http_client import BackendError
from .jsonfast import loads
from .layerwise import LayerwiseExchange, Metaserver
from .lease import request_whole
from .leg_bodies import prompt_text
from .recompute import Recompute

MODELS_TIMEOUT_S = 10.0  # /v1/models: first byte, then the whole answer


class PDFlow:
    def __init__(self, cfg, pools: dict[str, BackendPool], balancers: dict, metrics):
        self.cfg = cfg
        self.pools = pools
        self.balancers = balancers
        self.metrics = metrics
        self.loop = asyncio.get_event_loop()
        key = cfg.backend_api_key or os.environ.get("OPENAI_API_KEY")
        self.backend_auth = f"Bearer {key}".encode() if key else None
        self.recompute = Recompute(self)
        self.prompt_roles = frozenset(role for role, b in balancers.items() if getattr(b, "uses_prompt", False))
        self.link = None  # a worker's WorkerLink with --workers N: metaserver calls for another worker's requests
        self.layerwise = Metaserver(self) if cfg.pd_flow == "layerwise" else None
        self.exchange = LayerwiseExchange if self.layerwise else Exchange

    def hash_key(self, req, body: dict) -> str | None:
        k = self.cfg.hash_key
        if k == "request_id":
            return req.headers.get("x-request-id")
        if k == "user":
            user = body.get("user")
            return str(user) if user is not None else None
        if k == "client_ip":
            return req.client_ip
        return prompt_text(body)[: self.cfg.prefix_chars]

    async def generate(self, req, conn, endpoint: str):
        try:
            body, fast = loads(req.body)
        except (ValueError, UnicodeDecodeError) as exc:
            self.metrics.error("bad_request")
            conn.send_error(400, f"malformed JSON body: {exc}", "BadRequestError")
            return
        if not isinstance(body, dict):
            self.metrics.error("bad_request")
            conn.send_error(400, "the request body must be a JSON object", "BadRequestError")
            return
        await self.exchange(self, req, conn, endpoint, body, fast).run()

    async def metaserver(self, req, conn):
        """The Decodes' calls of the layerwise flow (layerwise.py)."""
        if self.layerwise is None:
            conn.send_error(404, "/v1/metaserver serves the layerwise flow; this proxy runs --pd-flow pull",
                            "NotFoundError")
            return
        await self.layerwise.handle(req, conn)

    async def models(self, req, conn):
        """Forwarded to the first healthy instance that answers (Decode first, then Prefill)."""
        last = None
        for role in ("decode", "prefill"):
            for b in self.pools[role].available():
                try:
                    answer, raw = await request_whole(b, self.loop, self.cfg.connect_timeout, b"GET", b"/v1/models",
                                                      MODELS_TIMEOUT_S)
                except BackendError as exc:
                    last = f"{role} {b.addr}: {exc.reason}"
                    continue
                if answer.status >= 500:
                    last = f"{role} {b.addr} answered HTTP {answer.status}"
                    continue
                conn.send_response(answer.status, raw, answer.headers.get("content-type", b"application/json"))
                return
        if last is None:
            conn.send_error(503, self.pools["decode"].why_unavailable() + "; "
                            + self.pools["prefill"].why_unavailable(), "ServiceUnavailableError")
        else:
            conn.send_error(502, f"no instance answered /v1/models; last error: {last}", "BadGatewayError")
