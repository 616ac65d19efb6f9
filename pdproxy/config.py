"""Proxy settings: one typed object built from CLI flags and/or a YAML file, validated before anything starts."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from dataclasses import dataclass, field

import yaml

import plainyaml

from .limits import RequestCaps

POLICIES = ("round_robin", "least_conn", "consistent_hash", "cache_aware")
HASH_KEYS = ("request_id", "user", "client_ip", "prefix")
PD_FLOWS = ("pull", "layerwise")  # MooncakeConnectorV1 (exchange.py), MooncakeLayerwiseConnector (layerwise.py)
WILDCARDS = ("", "0.0.0.0", "::", "0:0:0:0:0:0:0:0")


class ConfigError(ValueError):
    """A setting is missing or wrong; the message names it."""


def parse_address(text: str) -> tuple[str, int]:
    """'host:port' (or '[v6]:port') -> (host, port)."""
    text = text.strip()
    if text.startswith("http://"):
        text = text[len("http://"):].rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"not a HOST:PORT address: {text!r}")
    host = host.strip("[]")
    port_n = int(port)
    if not 0 < port_n < 65536:
        raise ConfigError(f"port out of range in {text!r}")
    return host, port_n


_HOST_NAME = re.compile(r"(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                        r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?")


def host_key(text: str) -> str:
    """An address as the layerwise metaserver compares them: an IP in its canonical text (an IPv4-mapped IPv6 address
    as the IPv4 one, no zone, no brackets), anything else (a host name) in lower case without a trailing dot."""
    text = text.strip().strip("[]")
    try:
        ip = ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return text.lower().rstrip(".")
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def parse_decode_hosts(entries, decode: list[str]) -> dict[str, tuple[str, ...]]:
    """`--decode-hosts` entries, `API_HOST:PORT=ADDR[,ADDR...]`: the other hosts (host_key form) a Decode instance's
    metaserver calls may come from and name as remote_host, by its address as a Backend spells it (host:port). The
    API address must be one of `decode`; each ADDR an IP address or a host name. ConfigError names the entry."""
    known = set()
    for addr in decode:
        host, port = parse_address(addr)
        known.add(f"{host}:{port}")
    out: dict[str, list[str]] = {}
    for entry in entries:
        api, sep, addrs = str(entry).partition("=")
        if not sep or not api.strip() or not addrs.strip():
            raise ConfigError(f"decode_hosts: {entry!r} is not API_HOST:PORT=ADDR[,ADDR...]")
        try:
            host, port = parse_address(api)
        except ConfigError as exc:
            raise ConfigError(f"decode_hosts: {entry!r}: {exc}") from None
        key = f"{host}:{port}"
        if key not in known:
            raise ConfigError(f"decode_hosts: {entry!r}: {api.strip()!r} is not one of the Decode instances "
                              f"(--decode {' '.join(decode) or 'names none'})")
        hosts = out.setdefault(key, [])
        for addr in addrs.split(","):
            name = addr.strip()
            bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
            if not (is_ip(bare.partition("%")[0]) or (bare == name and _HOST_NAME.fullmatch(name))):
                raise ConfigError(f"decode_hosts: {entry!r}: {name!r} is not an IP address or a host name (a "
                                  f"node the Decode's DP ranks run on)")
            if host_key(name) in WILDCARDS:
                raise ConfigError(f"decode_hosts: {entry!r}: {name!r} is a wildcard; name the node's address")
            hosts.append(host_key(name))
    return {key: tuple(dict.fromkeys(hosts)) for key, hosts in out.items()}


@dataclass
class Config:
    host: str = "127.0.0.1"
    port: int = 8000
    prefill: list[str] = field(default_factory=list)
    decode: list[str] = field(default_factory=list)
    # balancing
    policy: str = "least_conn"
    prefill_policy: str | None = None
    decode_policy: str | None = None
    hash_key: str = "request_id"
    prefix_chars: int = 256
    hash_load_factor: float = 1.25
    # cache_aware (cache_aware.py; SGLang router's defaults)
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    cache_chars: int = 1 << 22  # routed prompt characters remembered per instance
    kv_events: list[str] = field(default_factory=list)  # cache_aware's exact view: engines' KV events (kv_index.py)
    kv_events_topic: str = ""
    tokenizer: str | None = None  # the model's tokenizer dir (prompt_tokens.py), needed by kv_events
    sticky_header: str | None = None  # e.g. "x-session-id": same value -> same instances while healthy
    sticky_ttl: float = 600.0
    # health
    health_path: str = "/health"
    health_interval: float = 2.0
    health_timeout: float = 1.0
    # a busy engine may miss a check's deadline (a real vLLM on 2 cores did, every few seconds): only this many
    # unanswered checks in a row eject it; a refused connection or an error answer ejects at once
    health_timeouts_to_eject: int = 3
    eject_after_5xx: int = 3
    # retries and timeouts (seconds)
    max_retries: int = 3
    connect_timeout: float = 2.0
    first_byte_timeout: float = 300.0
    total_timeout: float = 1800.0
    # limits
    max_body_bytes: int = 16 * 1024 * 1024
    rate_limit: float = 0.0  # requests/s over all clients; 0 = off
    rate_burst: float = 0.0
    client_rate_limit: float = 0.0  # requests/s per client; 0 = off
    client_rate_burst: float = 0.0
    client_key: str = "client_ip"  # or "header:<name>"
    max_url_bytes: int = RequestCaps.max_url_bytes
    max_header_count: int = RequestCaps.max_header_count
    max_header_bytes: int = RequestCaps.max_header_bytes
    max_header_line_bytes: int = RequestCaps.max_header_line_bytes
    # admin and backends
    admin_token: str | None = None
    admin_host: str | None = None  # with admin_port: the admin API is served there only
    admin_port: int | None = None
    backend_api_key: str | None = None
    recompute: bool = True
    max_recomputes: int = 3
    pd_flow: str = "pull"
    advertise_host: str | None = None  # layerwise: the address in the metaserver URL the Decodes call back
    # layerwise: API HOST:PORT=ADDR[,ADDR...], the other nodes a Decode's metaserver calls come from (internal DP
    # over several nodes); YAML also {HOST:PORT: [ADDR, ...]}
    decode_hosts: list[str] = field(default_factory=list)
    log_level: str = "INFO"
    workers: int = 1  # serving processes (supervisor.py); "auto": auto_workers()

    def validate(self) -> Config:
        if not self.prefill or not self.decode:
            pass  # an empty role is allowed: instances may be added through the admin API
        for addr in [*self.prefill, *self.decode]:
            parse_address(addr)
        for name in ("policy", "prefill_policy", "decode_policy"):
            value = getattr(self, name)
            if value is not None and value not in POLICIES:
                raise ConfigError(f"{name}: {value!r} is not one of {', '.join(POLICIES)}")
        if self.hash_key not in HASH_KEYS:
            raise ConfigError(f"hash_key: {self.hash_key!r} is not one of {', '.join(HASH_KEYS)}")
        if not (self.client_key == "client_ip" or self.client_key.startswith("header:")):
            raise ConfigError("client_key must be 'client_ip' or 'header:<name>'")
        if self.hash_load_factor < 1.0:
            raise ConfigError("hash_load_factor must be >= 1.0")
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ConfigError("cache_threshold must be from 0 to 1")
        if self.balance_abs_threshold < 0:
            raise ConfigError("balance_abs_threshold must be >= 0")
        if self.balance_rel_threshold < 1.0:
            raise ConfigError("balance_rel_threshold must be >= 1.0")
        if self.cache_chars < 64:
            raise ConfigError("cache_chars must be >= 64 (one chunk)")
        self._validate_kv_events()
        for name in ("connect_timeout", "first_byte_timeout", "total_timeout", "health_interval",
                     "health_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        if self.health_timeouts_to_eject < 1:
            raise ConfigError("health_timeouts_to_eject must be >= 1")
        if self.max_retries < 0 or self.max_body_bytes <= 0:
            raise ConfigError("max_retries must be >= 0 and max_body_bytes > 0")
        self._validate_caps()
        self._validate_listeners()
        self._validate_pd_flow()
        self._validate_decode_hosts()
        self._validate_workers()
        if self.sticky_header:
            self.sticky_header = self.sticky_header.lower()
        return self

    def _validate_kv_events(self):
        from .kv_index import parse_specs

        if isinstance(self.kv_events, dict):  # YAML: {HOST:PORT: ENDPOINTS}
            self.kv_events = [f"{addr}={eps}" for addr, eps in self.kv_events.items()]
        elif isinstance(self.kv_events, str):
            self.kv_events = [self.kv_events]
        if not self.kv_events:
            return
        try:
            parse_specs([str(s) for s in self.kv_events])
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not self.tokenizer or not os.path.isfile(os.path.join(self.tokenizer, "tokenizer.json")):
            raise ConfigError(f"kv_events needs tokenizer: a directory with the model's tokenizer.json, to cut "
                              f"prompts into the engines' token blocks (got {self.tokenizer!r})")
        if "cache_aware" not in (self.policy, self.prefill_policy, self.decode_policy):
            raise ConfigError("kv_events is read by the cache_aware policy only: set policy or prefill_policy to "
                              "cache_aware")

    def _validate_caps(self):
        for name in ("max_url_bytes", "max_header_count", "max_header_bytes", "max_header_line_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a whole number > 0, not {value!r}")
        if self.max_header_line_bytes > self.max_header_bytes:
            raise ConfigError("max_header_line_bytes must not be larger than max_header_bytes")

    def _validate_listeners(self):
        if self.admin_host is not None and self.admin_port is None:
            raise ConfigError("admin_host needs admin_port (the admin listener's port)")
        if self.admin_port is not None:
            port = self.admin_port
            if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port < 65536:
                raise ConfigError(f"admin_port must be a port number 0-65535 (0 = any free port), not {port!r}")
            if self.admin_host is None:
                self.admin_host = self.host
            if port != 0 and port == self.port and self.admin_host == self.host:
                raise ConfigError(f"admin_port {port} is the main listener's port: give the admin API another one")
        for name in ("host", "admin_host"):
            value = getattr(self, name)
            if value in ("", "0.0.0.0", "::") and os.environ.get("PDPROXY_ALLOW_WILDCARD") != "1":
                # Binding every interface must be a deliberate act, not a default.
                raise ConfigError(f"{name}: refusing to bind a wildcard address ({value!r}); set "
                                  "PDPROXY_ALLOW_WILDCARD=1 to allow it")

    def _validate_workers(self):
        if self.workers == "auto":
            self.workers = auto_workers()
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or not 1 <= self.workers <= 256:
            raise ConfigError(f"workers must be a whole number from 1 to 256 or 'auto', not {self.workers!r}")

    def _validate_pd_flow(self):
        if self.pd_flow not in PD_FLOWS:
            raise ConfigError(f"pd_flow: {self.pd_flow!r} is not one of {', '.join(PD_FLOWS)}")
        if self.advertise_host is not None and self.advertise_host.strip("[]") in WILDCARDS:
            raise ConfigError(f"advertise_host: {self.advertise_host!r} is a wildcard; give an address the Decodes "
                              "can reach")
        if self.pd_flow != "layerwise":
            return
        if self.advertise_host is None and self.host in WILDCARDS:
            raise ConfigError(f"pd_flow layerwise: the Decodes call back http://HOST:PORT/v1/metaserver and host "
                              f"{self.host!r} is a wildcard; give --advertise-host an address they can reach")

    def _validate_decode_hosts(self):
        hosts = self.decode_hosts
        if isinstance(hosts, dict):  # YAML: {HOST:PORT: [ADDR, ...]} or {HOST:PORT: "ADDR,ADDR"}
            hosts = [f"{api}={','.join(map(str, addrs)) if isinstance(addrs, list | tuple) else addrs}"
                     for api, addrs in hosts.items()]
        elif isinstance(hosts, str):
            hosts = [hosts]
        elif not isinstance(hosts, list | tuple):
            raise ConfigError(f"decode_hosts must be a list of API_HOST:PORT=ADDR[,ADDR...] or a mapping, not "
                              f"{hosts!r}")
        self.decode_hosts = [str(h) for h in hosts]
        if not self.decode_hosts:
            return
        if self.pd_flow != "layerwise":
            raise ConfigError("decode_hosts is read by the layerwise flow only (--pd-flow layerwise): the Decodes' "
                              "metaserver calls")
        parse_decode_hosts(self.decode_hosts, self.decode)

    @property
    def admin_listener(self) -> tuple[str, int] | None:
        """(host, port) of the admin API's own listener, or None when it is served on the main one."""
        return None if self.admin_port is None else (self.admin_host or self.host, self.admin_port)

    def request_caps(self) -> RequestCaps:
        return RequestCaps(self.max_body_bytes, self.max_url_bytes, self.max_header_count, self.max_header_bytes,
                           self.max_header_line_bytes)

    def role_policy(self, role: str) -> str:
        return (self.prefill_policy if role == "prefill" else self.decode_policy) or self.policy


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


AUTO_WORKERS_MAX = 8


def auto_workers() -> int:
    """--workers auto: a quarter of the cores we may use (the proxy host usually runs engines too), 1 to 8; one
    worker serves about 10,000 short requests a second (bench/proxy/workers.py)."""
    return min(AUTO_WORKERS_MAX, max(1, available_cores() // 4))


FIELD_NAMES = {f.name for f in dataclasses.fields(Config)}


def load_yaml(path: str) -> dict:
    """Read a YAML config file into a dict of Config field values (dashes accepted for underscores)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = plainyaml.load(fh) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in FIELD_NAMES:
            raise ConfigError(f"{path}: unknown setting {key!r}")
        if name in ("prefill", "decode"):
            if isinstance(value, str):
                value = [value]
            value = [str(v) for v in value or []]
        out[name] = value
    return out
