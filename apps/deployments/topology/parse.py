"""Plain data (a dict from a form, JSON or YAML) -> TopologySpec, collecting every shape error with its path."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from plainyaml import short_repr
from sshexec import EnvExtend

from .model_catalog import CATALOG, catalog_names
from .spec import (
    BOOK_NAME_RE,
    CONTAINER_ENGINES,
    DEFAULT_RUN_ROOT,
    DP_STYLES,
    DTYPE_BYTES,
    ENV_NAME_RE,
    FLAG_RE,
    HASH_KEYS,
    KV_CONNECTORS,
    KV_LAYOUTS,
    LAUNCH_PROFILES,
    LOAD_FAILURE_POLICIES,
    MEMCACHE_PROTOCOLS,
    MINDIE_HARDWARE,
    NAME_RE,
    POLICIES,
    POOL_BACKENDS,
    ROLES,
    SIZE_RE,
    SPEC_RUNTIMES,
    WEIGHT_BYTES,
    BenchClientSpec,
    ContainerSpec,
    InstanceSpec,
    KvEventsSpec,
    KvPoolSpec,
    MindieSchedule,
    MindieSpec,
    ModelProfile,
    ModelSpec,
    ProxySpec,
    SimulationSpec,
    SpecError,
    StoreServer,
    StoreSpec,
    TopologySpec,
    TransferPortsSpec,
)


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


class _Reader:
    """Reads one mapping level; errors pile up in the shared list so one pass reports them all."""

    def __init__(self, errors: list[tuple[str, str]], data: Any, path: str, required: tuple[str, ...],
                 optional: tuple[str, ...] = ()):
        self.errors, self.path, self.ok = errors, path, isinstance(data, Mapping)
        self.data: Mapping = data if self.ok else {}
        if not self.ok:
            errors.append((path, f"expected a mapping, got {_show(data)}"))
            return
        for key in self.data:
            if key not in required and key not in optional:
                known = ", ".join(required + optional)
                errors.append((_join(path, str(key)), f"unknown field; known fields: {known}"))
        for key in required:
            if key not in self.data:
                errors.append((_join(path, key), "missing required field"))

    def raw(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def bad(self, key: str | int, message: str) -> None:
        self.errors.append((_join(self.path, key), message))

    def integer(self, key: str, default: Any, minimum: int = 1, maximum: int | None = None) -> Any:
        if key not in self.data:  # a missing required field was already reported
            return default
        value = self.data[key]
        if value is None and default is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (
                maximum is not None and value > maximum):
            self.bad(key, f"expected {_int_kind(minimum, maximum)}, got {_show(value)}")
            return default if default is not None else minimum
        return value

    def port(self, key: str, default: Any) -> Any:
        return self.integer(key, default, minimum=1, maximum=65535)

    def text(self, key: str, default: Any, choices: tuple[str, ...] | None = None) -> Any:
        if key not in self.data:  # a missing required field was already reported
            return default
        value = self.data[key]
        if value is None and default is None:
            return None
        if not isinstance(value, str) or not value or "\0" in value:
            self.bad(key, f"expected a non-empty string, got {_show(value)}")
            return ""
        if choices is not None and value not in choices:
            self.bad(key, f"expected one of {', '.join(choices)}, got {_show(value)}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            self.bad(key, f"expected true or false, got {_show(value)}")
            return default
        return value


def _show(value: Any) -> str:
    text = short_repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int_kind(minimum: int, maximum: int | None) -> str:
    if maximum == 65535:
        return f"a port number {minimum}-65535"
    if maximum is not None:
        return f"an integer {minimum}-{maximum}"
    return "a positive integer" if minimum == 1 else f"an integer >= {minimum}"


def spec_from_dict(data: Any, *, deployment_name: str | None = None) -> TopologySpec:
    """Build a TopologySpec or raise SpecError listing every bad field. An omitted run_dir becomes the launch
    profile's DEFAULT_RUN_ROOT/<deployment_name> (the root alone without a name)."""
    errors: list[tuple[str, str]] = []
    top = _Reader(errors, data, "", ("model", "instances", "proxy"),
                  ("kv_pool", "store", "bench_client", "launch_profile", "run_dir", "transfer_ports",
                   "simulation", "kv_connector", "mindie", "runtime", "container"))
    if not top.ok:
        raise SpecError(errors)
    model = _model(errors, top.raw("model", {}))
    instances = _instances(errors, top.raw("instances", []))
    proxy = _proxy(errors, top.raw("proxy", {}))
    kv_pool = _optional(top, "kv_pool", lambda d: _kv_pool(errors, d))
    store = _optional(top, "store", lambda d: _store(errors, d))
    bench = _optional(top, "bench_client", lambda d: _bench(errors, d))
    transfer = _optional(top, "transfer_ports", lambda d: _transfer(errors, d)) or TransferPortsSpec()
    simulation = _optional(top, "simulation", lambda d: _simulation(errors, d))
    mindie = _optional(top, "mindie", lambda d: _mindie(errors, d))
    profile = top.text("launch_profile", "vllm-ascend", LAUNCH_PROFILES)
    run_dir = _run_dir(top, profile, deployment_name)
    kv_connector = _kv_connector(top)
    runtime = top.text("runtime", "host", SPEC_RUNTIMES)
    container = _optional(top, "container", lambda d: _container(errors, d))
    if runtime == "container" and container is None and "container" not in top.data:
        top.bad("container", "runtime: container needs a container block: {image: <repository>:<tag>, "
                             "mounts: [<names from the cluster's mount list>]}")
    elif runtime != "container" and "container" in top.data:
        top.bad("container", "only runtime: container takes a container block: set runtime: container, or remove it")
    if errors:
        raise SpecError(errors)
    return TopologySpec(model=model, instances=instances, proxy=proxy, kv_pool=kv_pool, store=store,
                        bench_client=bench, launch_profile=profile, run_dir=run_dir, transfer_ports=transfer,
                        simulation=simulation, kv_connector=kv_connector, mindie=mindie, runtime=runtime,
                        container=container)


def normal_run_dir(path: str) -> str:
    """One spelling per directory: repeated slashes collapsed (POSIX leaves a leading '//' to the implementation,
    so PurePosixPath keeps it), '.' parts and a trailing slash dropped. ValueError for '..' or no directory."""
    if not path.startswith("/"):
        raise ValueError(f"expected an absolute path, got {_show(path)}")
    if any(not c.isprintable() for c in path):  # a newline or tab in a directory name only ever hides something
        raise ValueError(f"control characters (newline, tab...) are not allowed in a path, got {_show(path)}")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"'..' is not allowed in {_show(path)}: spell the directory itself")
    if not parts:
        raise ValueError(f"expected a directory below /, got {_show(path)}")
    return "/" + "/".join(parts)


def _run_dir(top: _Reader, profile: str, deployment_name: str | None) -> str:
    root = DEFAULT_RUN_ROOT.get(profile, DEFAULT_RUN_ROOT["vllm-ascend"])
    default = f"{root}/{deployment_name}" if deployment_name and _DIR_NAME_RE.match(deployment_name) else root
    run_dir = top.text("run_dir", default)
    if not run_dir:
        return run_dir
    try:
        return normal_run_dir(run_dir)
    except ValueError as exc:
        top.bad("run_dir", str(exc))
        return run_dir


def _directory(r: _Reader, key: str, default):
    """An absolute directory in its one spelling (normal_run_dir), or the default when absent."""
    value = r.text(key, default)
    if not value:
        return value
    try:
        return normal_run_dir(value)
    except ValueError as exc:
        r.bad(key, str(exc))
        return value


_DIR_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")  # a deployment name (inventory name_validator)


def _kv_connector(top: _Reader) -> str:
    value = top.raw("kv_connector", "pull")
    if not isinstance(value, str) or value not in KV_CONNECTORS:
        choices = " or ".join(f"{k} ({v})" for k, v in KV_CONNECTORS.items())
        hint = next((f"; write {k} for {v}" for k, v in KV_CONNECTORS.items() if value == v), "")
        top.bad("kv_connector", f"expected {choices}, got {_show(value)}{hint}")
        return "pull"
    return value


def _optional(top: _Reader, key: str, build):
    value = top.raw(key, None)
    return None if value is None else build(value)


_PROFILE_SHAPE = ("layers", "kv_heads", "head_dim", "dtype", "attention_heads")
_PROFILE_OPTIONAL = ("kv_layout", "weights", "params_b", "expert_params_b", "experts", "unquantized_params_b",
                     "hidden_size", "max_position")


def _model(errors, data) -> ModelSpec:
    r = _Reader(errors, data, "model", ("path", "served_name", "profile"))
    raw = r.raw("profile", {})
    if isinstance(raw, str):
        profile = _catalog_profile(r, raw)
    elif isinstance(raw, Mapping):
        profile = _profile(errors, raw)
    else:
        r.bad("profile", f"expected a catalog name ({', '.join(catalog_names())}) or a mapping, got {_show(raw)}")
        profile = ModelProfile(layers=1, kv_heads=1, head_dim=1, dtype="bfloat16", attention_heads=1)
    path, served_name = r.text("path", ""), r.text("served_name", "")
    for key, value in (("path", path), ("served_name", served_name)):
        if value.startswith("-"):  # the engine would read it as an option (e.g. --worker-extension-cls=...)
            r.bad(key, f"may not start with '-', got {_show(value)}")
    if len(served_name) > SERVED_NAME_MAX:
        r.bad("served_name", f"at most {SERVED_NAME_MAX} characters, got {len(served_name)}")
    return ModelSpec(path=path, served_name=served_name, profile=profile)


SERVED_NAME_MAX = 200  # what a revision stores of it (Revision.served_model)


def _catalog_profile(r: _Reader, name: str) -> ModelProfile:
    """`profile: qwen3-235b-a22b`: the catalog entry of that name (topology/model_catalog.py)."""
    if name not in CATALOG:
        r.bad("profile", f"unknown model profile {_show(name)}; known profiles: {', '.join(catalog_names())} "
                         "(or spell the profile out as a mapping)")
        return ModelProfile(layers=1, kv_heads=1, head_dim=1, dtype="bfloat16", attention_heads=1)
    return ModelProfile(name=name, **CATALOG[name])


def _profile(errors, data) -> ModelProfile:
    p = _Reader(errors, data, "model.profile", _PROFILE_SHAPE, _PROFILE_OPTIONAL)
    params = _billions(p, "params_b", None)
    experts_b = _billions(p, "expert_params_b", 0.0, zero=True)
    unquantized = _billions(p, "unquantized_params_b", 0.0, zero=True)
    for key, value in (("expert_params_b", experts_b), ("unquantized_params_b", unquantized)):
        if value and params is None:
            p.bad(key, "needs params_b (all the parameters loaded, in billions) beside it")
        elif params is not None and value > params:
            p.bad(key, f"{value:g} is more than params_b {params:g}: it counts a part of params_b")
    return ModelProfile(layers=p.integer("layers", 1), kv_heads=p.integer("kv_heads", 1),
                        head_dim=p.integer("head_dim", 1), dtype=p.text("dtype", "bfloat16", tuple(DTYPE_BYTES)),
                        attention_heads=p.integer("attention_heads", 1),
                        kv_layout=p.text("kv_layout", "mha", KV_LAYOUTS),
                        weights=p.text("weights", "bfloat16", tuple(WEIGHT_BYTES)), params_b=params,
                        expert_params_b=experts_b, experts=p.integer("experts", None),
                        unquantized_params_b=unquantized, hidden_size=p.integer("hidden_size", None),
                        max_position=p.integer("max_position", None))


def _billions(r: _Reader, key: str, default: float | None, *, zero: bool = False) -> float | None:
    """A parameter count in billions (235.09): a positive number, or >= 0 where `zero`."""
    if key not in r.data:
        return default
    value = r.data[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or (value == 0 and not zero) \
            or value != value or value == float("inf"):
        r.bad(key, f"expected a number of parameters in billions like 235.09, got {_show(value)}")
        return default
    return float(value)


_INSTANCE_REQUIRED = ("name", "role", "tp", "api_port", "kv_port")
_INSTANCE_OPTIONAL = ("node", "nodes", "dp", "dp_style", "devices", "dp_rpc_port", "expert_parallel", "ep_size",
                      "max_num_seqs",
                      "max_model_len", "extra_args", "env", "engine_id")
ENGINE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")
PARALLEL_MAX = 1024  # tp and dp: far above any cluster's dies, and the plan enumerates every rank


def _instances(errors, data) -> tuple[InstanceSpec, ...]:
    if not isinstance(data, list):
        errors.append(("instances", f"expected a list of instances, got {_show(data)}"))
        return ()
    out = []
    for index, item in enumerate(data):
        r = _Reader(errors, item, f"instances[{index}]", _INSTANCE_REQUIRED, _INSTANCE_OPTIONAL)
        name = r.text("name", "")
        if name and not NAME_RE.match(name):
            r.bad("name", f"expected lowercase letters, digits and '-' (e.g. p0), got {_show(name)}")
        span = _span(r)
        engine_id = r.text("engine_id", None)
        if engine_id and not ENGINE_ID_RE.match(engine_id):
            r.bad("engine_id", f"expected letters, digits, '_', '.' and '-' (e.g. \"0\"), got {_show(engine_id)}")
        tp, dp = r.integer("tp", 1), r.integer("dp", 1)
        for key, value in (("tp", tp), ("dp", dp)):
            if isinstance(value, int) and value > PARALLEL_MAX:
                r.bad(key, f"expected at most {PARALLEL_MAX}, got {_show(value)}")
        out.append(InstanceSpec(
            name=name, role=r.text("role", "prefill", ROLES), node=span[0] if span else "",
            nodes=span if len(span) > 1 else (), tp=tp, dp=dp, dp_style=r.text("dp_style", "external", DP_STYLES),
            devices=_devices(r), api_port=r.port("api_port", 1), kv_port=r.port("kv_port", 1),
            dp_rpc_port=r.port("dp_rpc_port", None), expert_parallel=r.boolean("expert_parallel", False),
            ep_size=r.integer("ep_size", None, maximum=PARALLEL_MAX * PARALLEL_MAX),
            max_num_seqs=r.integer("max_num_seqs", None), max_model_len=r.integer("max_model_len", None),
            extra_args=_extra_args(r), env=_env(r), engine_id=engine_id))
    return tuple(out)


def _span(r: _Reader) -> tuple[str, ...]:
    """`node: a` or `nodes: [a, b, ...]` (an instance spanning nodes, the first one its DP master)."""
    has_node, has_nodes = "node" in r.data, "nodes" in r.data
    if has_node and has_nodes:
        r.bad("nodes", "give either node (one node) or nodes (an instance spanning several), not both")
        return ()
    if has_node:
        return (r.text("node", ""),)
    if not has_nodes:
        if r.ok:
            r.bad("node", "missing required field")
        return ()
    value = r.raw("nodes")
    if not isinstance(value, list) or not value:
        r.bad("nodes", f"expected a non-empty list of node names, got {_show(value)}")
        return ()
    out = []
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name or "\0" in name:
            r.errors.append((f"{r.path}.nodes[{i}]", f"expected a node name, got {_show(name)}"))
        elif name in out:
            r.errors.append((f"{r.path}.nodes[{i}]", f"node {name!r} is listed twice"))
        else:
            out.append(name)
    return tuple(out)


def _devices(r: _Reader) -> tuple[int, ...] | None:
    value = r.raw("devices", None)
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        r.bad("devices", f"expected a list of NPU logical ids or null, got {_show(value)}")
        return None
    for i, dev in enumerate(value):
        if isinstance(dev, bool) or not isinstance(dev, int) or dev < 0:
            r.errors.append((f"{r.path}.devices[{i}]", f"expected an integer >= 0, got {_show(dev)}"))
            return None
    return tuple(value)


def _extra_args(r: _Reader) -> tuple[str, ...]:
    """`--flag` tokens, each optionally followed by exactly one value token (a value may not start with --)."""
    value = r.raw("extra_args", [])
    if not isinstance(value, list):
        r.bad("extra_args", f"expected a list like ['--enforce-eager', '--seed', '1024'], got {_show(value)}")
        return ()
    expecting_value_for = None
    for i, token in enumerate(value):
        path = f"{r.path}.extra_args[{i}]"
        if not isinstance(token, str) or "\0" in token:
            r.errors.append((path, f"expected a string, got {_show(token)}"))
        elif token.startswith("--"):
            if not FLAG_RE.match(token):
                r.errors.append((path, f"{_show(token)} is not a flag name (^--[a-z0-9][a-z0-9-]*$); "
                                       "put its value in the next item"))
            expecting_value_for = token
        elif expecting_value_for is None:
            r.errors.append((path, f"value {_show(token)} does not follow a --flag"))
        elif token.startswith("-") and not _NUMBER_RE.match(token):
            # A value must not be read as an option by the engine's parser (e.g. "-tp=1" would set TP).
            r.errors.append((path, f"value {_show(token)} looks like an option; options are --flags of their own"))
        else:
            expecting_value_for = None
    return tuple(t for t in value if isinstance(t, str))


_NUMBER_RE = re.compile(r"^-\d+(\.\d+)?$")


def _env(r: _Reader) -> Mapping[str, str]:
    value = r.raw("env", {})
    if not isinstance(value, Mapping):
        r.bad("env", f"expected a mapping NAME: value, got {_show(value)}")
        return MappingProxyType({})
    env = {}
    for name, val in value.items():
        path = f"{r.path}.env.{name}"
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            r.errors.append((path, f"expected an env name like HCCL_BUFFSIZE (^[A-Z_][A-Z0-9_]*$), got {_show(name)}"))
        elif isinstance(val, Mapping):
            extend = _env_extend(r.errors, path, val)
            if extend:
                env[name] = extend
        elif isinstance(val, bool) or not isinstance(val, str | int) or "\0" in str(val):
            r.errors.append((path, f"expected a string (quote it in YAML) or {{prepend: ..}} / {{append: ..}}, "
                                   f"got {_show(val)}"))
        else:
            env[name] = str(val)
    return MappingProxyType(dict(sorted(env.items())))


def _env_extend(errors, path: str, data: Mapping) -> EnvExtend | None:
    """{prepend: /x/mooncake} keeps the node's value after it (LD_LIBRARY_PATH=/x/mooncake:$LD_LIBRARY_PATH)."""
    r = _Reader(errors, data, path, (), ("prepend", "append", "separator"))
    prepend, append = r.text("prepend", ""), r.text("append", "")
    separator = r.text("separator", ":", (":", ";", ",", " "))
    if not prepend and not append:
        if "prepend" not in data and "append" not in data:
            r.bad("prepend", "give prepend or append (or both), e.g. {prepend: /usr/local/lib/mooncake}")
        return None
    for key, part in (("prepend", prepend), ("append", append)):
        if "$" in part:
            r.bad(key, f"a literal '$' would not expand here, got {_show(part)}; the node's own value is kept "
                       "by the prepend/append form itself")
    return EnvExtend(prepend=prepend, append=append, separator=separator)


_POOL_DEFAULT_PORTS = {"mooncake": (50088, 9003), "memcache": (5000, 8000)}
# kv_pool.install_path: a library directory (LD_LIBRARY_PATH), as an instance's {prepend: ..} entries are spelt
# (topology/engine_rules.py); no ':' (a list separator there), space, '$' or quote.
LIBRARY_DIR_RE = re.compile(r"^(/[A-Za-z0-9_.+@-]+)+\Z")


def _kv_pool(errors, data) -> KvPoolSpec:
    r = _Reader(errors, data, "kv_pool", ("node",),
                ("backend", "rpc_port", "metrics_port", "config_store_port", "segment_size", "protocol",
                 "install_path", "load_failure_policy", "consumer_is_to_load", "consumer_is_to_put", "prefer_local"))
    backend = r.text("backend", "mooncake", POOL_BACKENDS)
    rpc, metrics = _POOL_DEFAULT_PORTS.get(backend, _POOL_DEFAULT_PORTS["mooncake"])
    size = r.text("segment_size", "1GB")
    if size and not SIZE_RE.match(size):
        r.bad("segment_size", f"expected whole gigabytes like 1GB or 4GB (Mooncake needs 1GB alignment), "
                              f"got {_show(size)}")
    protocol = r.text("protocol", None, MEMCACHE_PROTOCOLS)
    install_path = _directory(r, "install_path", None)
    if install_path and not LIBRARY_DIR_RE.match(install_path):
        r.bad("install_path", "expected one plain absolute directory (letters, digits, '.', '_', '+', '@', '-' between "
                              f"'/'), got {_show(install_path)}: <install_path>/memcache_hybrid/lib goes into "
                              "LD_LIBRARY_PATH, where a ':' would add directories (an empty or relative one is searched "
                              "in the run dir)")
    if backend != "memcache":
        for key in ("protocol", "install_path", "config_store_port"):
            if key in r.data:
                r.bad(key, f"only the memcache backend takes {key}; Mooncake on NPUs always uses protocol ascend")
    elif "prefer_local" in r.data:
        r.bad("prefer_local", "only the mooncake backend takes prefer_local (mooncake.json prefer_alloc_in_same_node)")
    return KvPoolSpec(
        node=r.text("node", ""), backend=backend, rpc_port=r.port("rpc_port", rpc),
        metrics_port=r.port("metrics_port", metrics), config_store_port=r.port("config_store_port", 6000),
        segment_size=size, protocol=protocol, install_path=install_path,
        load_failure_policy=r.text("load_failure_policy", None, LOAD_FAILURE_POLICIES),
        consumer_is_to_load=r.boolean("consumer_is_to_load", False),
        consumer_is_to_put=r.boolean("consumer_is_to_put", False), prefer_local=r.boolean("prefer_local", True))


def _store(errors, data) -> StoreSpec:
    r = _Reader(errors, data, "store", ("servers",), ("replicas", "memory_mb"))
    servers = []
    raw = r.raw("servers", [])
    if not isinstance(raw, list) or not raw:
        r.bad("servers", f"expected a non-empty list of {{node, port}}, got {_show(raw)}")
        raw = []
    for i, item in enumerate(raw):
        s = _Reader(errors, item, f"store.servers[{i}]", ("node", "port"))
        servers.append(StoreServer(node=s.text("node", ""), port=s.port("port", 1)))
    return StoreSpec(servers=tuple(servers), replicas=r.integer("replicas", 1), memory_mb=r.integer("memory_mb", 64))


MAX_PROXY_WORKERS = 64


def _proxy(errors, data) -> ProxySpec:
    r = _Reader(errors, data, "proxy", ("node", "port"), ("admin_port", "policy", "hash_key", "workers",
                                                              "kv_events"))
    port = r.port("port", 8000)
    # port + 1 may be 65536: validation then reports it on admin_port like any port past the end.
    admin_port = r.port("admin_port", port + 1)
    workers = r.raw("workers", "auto")
    if workers != "auto" and (isinstance(workers, bool) or not isinstance(workers, int)
                              or not 1 <= workers <= MAX_PROXY_WORKERS):
        r.bad("workers", f"expected auto or a whole number from 1 to {MAX_PROXY_WORKERS}, got {_show(workers)}")
        workers = "auto"
    return ProxySpec(node=r.text("node", ""), port=port, admin_port=admin_port,
                     policy=r.text("policy", "round_robin", POLICIES), hash_key=r.text("hash_key", None, HASH_KEYS),
                     workers=workers, kv_events=_kv_events(errors, r.raw("kv_events")))


def _kv_events(errors, data) -> KvEventsSpec | None:
    if data is None:
        return None
    r = _Reader(errors, data, "proxy.kv_events", (), ("port", "replay_port"))
    # 0: tcp://*:0, a port the engine picks on its node's address, which the proxy asks it for (docs/kv-events.md)
    return KvEventsSpec(port=r.integer("port", 5557, minimum=0, maximum=65535),
                        replay_port=r.integer("replay_port", None, minimum=0, maximum=65535))


def _bench(errors, data) -> BenchClientSpec:
    r = _Reader(errors, data, "bench_client", ("node",))
    return BenchClientSpec(node=r.text("node", ""))


def _transfer(errors, data) -> TransferPortsSpec:
    r = _Reader(errors, data, "transfer_ports", (), ("base", "per_device"))
    return TransferPortsSpec(base=r.port("base", 20000), per_device=r.integer("per_device", 100))


def _simulation(errors, data) -> SimulationSpec:
    r = _Reader(errors, data, "simulation", ("answer_book",), ("accuracy", "think"))
    book = r.text("answer_book", "")
    if book and not BOOK_NAME_RE.match(book):
        r.bad("answer_book", f"expected a book name (lowercase letters, digits, '-'), got {_show(book)}")
    accuracy = r.raw("accuracy", 1.0)
    if isinstance(accuracy, bool) or not isinstance(accuracy, int | float) or not 0 <= accuracy <= 1:
        r.bad("accuracy", f"expected a number from 0 to 1, got {_show(accuracy)}")
        accuracy = 1.0
    return SimulationSpec(answer_book=book, accuracy=float(accuracy), think=r.boolean("think", False))


# docker's --shm-size: a number and a unit (docs/container-launch-facts.md §1.5: 1g in the guides, MindIE 2g-9g)
SHM_SIZE_RE = re.compile(r"^[1-9][0-9]{0,5}[kmg]\Z")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
# <repository>:<tag>, the repository in lowercase (the cluster allowlist's spelling, apps/inventory/allowlist.py)
CONTAINER_IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._/:-]{0,254}\Z")
_IMAGE_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")


def _container(errors, data) -> ContainerSpec:
    r = _Reader(errors, data, "container", ("image",), ("digest", "engine", "mounts", "shm_size"))
    image = r.text("image", "")
    problem = _image_problem(image) if image else ""
    if problem:
        r.bad("image", problem)
    digest = r.text("digest", "")
    if digest and not DIGEST_RE.match(digest):
        r.bad("digest", f"expected sha256:<64 lowercase hex digits>, got {_show(digest)}")
    shm_size = r.text("shm_size", "1g")
    if shm_size and not SHM_SIZE_RE.match(shm_size):
        r.bad("shm_size", f"expected a size like 1g or 512m (a number, then k, m or g), got {_show(shm_size)}")
    return ContainerSpec(image=image, digest=digest, engine=r.text("engine", "docker", CONTAINER_ENGINES),
                         mounts=_mount_names(r), shm_size=shm_size)


def _image_problem(image: str) -> str:
    """Why `image` is not <repository>:<tag> pinned by its tag ('' when it is)."""
    if "@" in image:
        return f"give the digest in container.digest, not after '@' in the image, got {_show(image)}"
    if not CONTAINER_IMAGE_RE.match(image):
        return f"expected an image reference like quay.io/ascend/vllm-ascend:v0.23.0-a3, got {_show(image)}"
    head, _, last = image.rpartition("/")
    _, sep, tag = last.partition(":")
    if not sep or not _IMAGE_TAG_RE.match(tag):
        return f"{_show(image)} has no tag: pin it with an explicit <repository>:<tag>"
    if tag == "latest":
        return f"{_show(image)}: 'latest' moves; pin a release tag"
    return ""


def _mount_names(r: _Reader) -> tuple[str, ...]:
    value = r.raw("mounts", [])
    if not isinstance(value, list):
        r.bad("mounts", f"expected a list of mount names from the cluster's mount list, got {_show(value)}")
        return ()
    out: list[str] = []
    for i, name in enumerate(value):
        path = f"{r.path}.mounts[{i}]"
        if not isinstance(name, str) or not NAME_RE.match(name):
            r.errors.append((path, f"expected a mount name (lowercase letters, digits, '-'), got {_show(name)}"))
        elif name in out:
            r.errors.append((path, f"mount {name!r} is listed twice"))
        else:
            out.append(name)
    return tuple(out)


_MINDIE_OPTIONAL = ("job_id", "image_name", "hardware_type", "weight_mount_path", "max_seq_len", "max_input_token_len",
                    "prefill", "decode", "ready_timeout_s", "extra")
# deploy_config.job_id is a Kubernetes namespace: an RFC 1123 label
K8S_NAMESPACE_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}\Z")
MINDIE_SCHEDULE = {"max_prefill_batch_size": "maxPrefillBatchSize", "max_prefill_tokens": "maxPrefillTokens",
                   "max_batch_size": "maxBatchSize", "max_iter_times": "maxIterTimes"}


def _mindie(errors, data) -> MindieSpec:
    r = _Reader(errors, data, "mindie", ("deploy_host", "scripts_dir"), _MINDIE_OPTIONAL)
    scripts_dir = _directory(r, "scripts_dir", "")
    job_id = r.text("job_id", "mindie")
    if job_id and not K8S_NAMESPACE_RE.match(job_id):
        r.bad("job_id", f"expected a Kubernetes namespace (lowercase letters, digits, '-', at most 63), got {_show(job_id)}")
    image = r.text("image_name", "")
    if image and not IMAGE_RE.match(image):
        r.bad("image_name", f"expected an image reference like mindie:2.1.RC1-800I-A3, got {_show(image)}")
    weights = _directory(r, "weight_mount_path", None)
    extra = r.raw("extra", {})
    if not isinstance(extra, Mapping):
        r.bad("extra", f"expected a JSON object of user_config.json fields, got {_show(extra)}")
        extra = {}
    else:
        _json_only(errors, "mindie.extra", extra)
    return MindieSpec(
        deploy_host=r.text("deploy_host", ""), scripts_dir=scripts_dir, job_id=job_id, image_name=image,
        hardware_type=r.text("hardware_type", None, MINDIE_HARDWARE), weight_mount_path=weights,
        max_seq_len=r.integer("max_seq_len", None), max_input_token_len=r.integer("max_input_token_len", None),
        prefill=_schedule(errors, r.raw("prefill", {}), "mindie.prefill"),
        decode=_schedule(errors, r.raw("decode", {}), "mindie.decode"),
        ready_timeout_s=r.integer("ready_timeout_s", 1800, minimum=10, maximum=24 * 3600),
        extra=MappingProxyType(dict(extra)))


def _schedule(errors, data, path: str) -> MindieSchedule:
    r = _Reader(errors, data, path, (), tuple(MINDIE_SCHEDULE))
    return MindieSchedule(**{key: r.integer(key, None, maximum=10_000_000) for key in MINDIE_SCHEDULE})


def _json_only(errors, path: str, value: Any) -> None:
    """What json.dumps writes back as it was read: objects with string keys, lists, strings, finite numbers,
    booleans and null."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or not key or "\0" in key:
                errors.append((path, f"expected string keys, got {_show(key)}"))
                continue
            _json_only(errors, f"{path}.{key}", item)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _json_only(errors, f"{path}[{i}]", item)
    elif isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        errors.append((path, f"expected a finite number, got {_show(value)}"))
    elif value is not None and not isinstance(value, str | int | float | bool):
        errors.append((path, f"expected a JSON value (object, list, string, number, true/false, null), "
                             f"got {_show(value)}"))
    elif isinstance(value, str) and "\0" in value:
        errors.append((path, "a NUL character cannot be written to user_config.json"))
