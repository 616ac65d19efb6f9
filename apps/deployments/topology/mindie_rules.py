"""Expert parallelism (every profile) and what a `mindie` topology must be (docs/mindie.md): MindIE renders one
server config per role, runs pods of whole nodes, and brings its own coordinator and KV transfer."""

from __future__ import annotations

from .allowlist import NO_ALLOWLIST, ClusterAllowlist
from .mindie_extra import IS_RENDERED, NOT_LISTED, extra_problems, trusts_remote_code
from .node_facts import NodeFacts
from .problem import Problem, instance_path
from .spec import ProxySpec, TopologySpec

MAX_INSTANCES = 16  # MindIE: p_instances_num / d_instances_num in [1, 16]
MAX_POD_NPUS = 16  # p_pod_npu_num / d_pod_npu_num: at most 16 per pod
_PROXY_DEFAULTS = ProxySpec(node="")
# What one server config of a role fixes for all its instances: (field to name, in words, the value)
_SHAPES = (("nodes", "node count", lambda i: len(i.span)), ("tp", "devices per node", lambda i: i.npus),
           ("ep_size", "EP size", lambda i: i.ep), ("dp_style", "dp_style", lambda i: i.dp_style))


def expert_parallel_rules(spec: TopologySpec, out: list[Problem]) -> None:
    experts = spec.model.profile.experts
    for inst in spec.instances:
        if inst.ep_size is not None and not inst.expert_parallel:
            out.append(Problem(instance_path(spec, inst, "ep_size"), f"{inst.name}: ep_size {inst.ep_size} without "
                               "expert_parallel", "set expert_parallel: true, or remove ep_size"))
            continue
        if not inst.expert_parallel:
            continue
        total = inst.npus_total
        if total % inst.ep:
            fits = [e for e in range(1, total + 1) if total % e == 0]
            out.append(Problem(instance_path(spec, inst, "ep_size"), f"{inst.name}: EP{inst.ep} does not fit its "
                               f"{total} devices (TP{inst.tp} x DP{inst.dp}): the expert groups must tile them",
                               f"use an ep_size that divides {total}: {', '.join(map(str, fits))}"))
            continue
        if spec.launch_profile != "mindie" and inst.ep_size not in (None, total):
            out.append(Problem(instance_path(spec, inst, "ep_size"), f"{inst.name}: vLLM's expert-parallel group is "
                               f"always TP x DP = {total}, ep_size says {inst.ep_size}",
                               f"remove ep_size (or set it to {total}); only MindIE takes another EP size (moe_ep)"))
        if experts and experts % inst.ep:
            out.append(Problem(instance_path(spec, inst, "ep_size"), f"{inst.name}: the model's {experts} routed "
                               f"experts do not split evenly over EP{inst.ep}",
                               f"use an EP size that divides {experts} and {total}"))


def mindie_rules(spec: TopologySpec, nodes: dict[str, NodeFacts], out: list[Problem],
                 allowlist: ClusterAllowlist = NO_ALLOWLIST) -> None:
    m = spec.mindie
    if spec.launch_profile != "mindie":
        if m is not None:
            out.append(Problem("mindie", f"the mindie block is read only by launch_profile mindie, not "
                               f"{spec.launch_profile}", "remove mindie, or set launch_profile: mindie"))
        return
    if m is None:
        out.append(Problem("mindie", "launch_profile mindie needs a mindie block: the deploy host and MindIE's "
                           "deploy scripts directory", "add mindie: {deploy_host: <node>, scripts_dir: "
                           "<.../kubernetes_deploy_scripts>}"))
        return
    if m.deploy_host not in nodes:
        out.append(Problem("mindie.deploy_host", f"node {m.deploy_host!r} is not in the cluster",
                           f"use one of: {', '.join(sorted(nodes)) or 'none'}"))
    _not_for_mindie(spec, out)
    for role in ("prefill", "decode"):
        group = [i for i in spec.instances if i.role == role]
        if len(group) > MAX_INSTANCES:
            out.append(Problem("instances", f"{len(group)} {role} instances: MindIE takes at most {MAX_INSTANCES}",
                               f"use at most {MAX_INSTANCES} {role} instances"))
        for inst in group[1:]:
            for field, what, shape in _SHAPES:
                if shape(inst) != shape(group[0]):
                    out.append(Problem(instance_path(spec, inst, field),
                                       f"{inst.name}: its {what} differs from {group[0].name}'s, but user_config.json "
                                       f"has one {role} server config for all {role} instances",
                                       f"give every {role} instance the same {what}"))
                    break
        for inst in group:
            if inst.npus > MAX_POD_NPUS:
                out.append(Problem(instance_path(spec, inst, "tp"), f"{inst.name}: {inst.npus} devices per node, a "
                                   f"MindIE pod takes at most {MAX_POD_NPUS}", "lower TP or DP per node"))
    _admin_choices(spec, allowlist, out)
    _extra(spec, allowlist, out)


def _admin_choices(spec: TopologySpec, allowlist: ClusterAllowlist, out: list[Problem]) -> None:
    """The image, the weights MindIE mounts into every pod and the scripts the deploy runs are the cluster admin's
    (Cluster.allowlist): a topology picks among them, never names its own."""
    m = spec.mindie
    ask = "or ask an admin to add it to the cluster's allowlist (docs/cluster-allowlist.md)"
    if allowlist.image(m.image_name) is None:
        listed = ", ".join(i.reference for i in allowlist.images) or "none: the cluster's allowlist has no image"
        said = f"image {m.image_name!r} is not" if m.image_name else "no image is named; it must be"
        out.append(Problem("mindie.image_name", f"{said} one of the cluster's images ({listed})",
                           f"name one of them, {ask}"))
    field, weights = ("mindie.weight_mount_path", m.weight_mount_path) if m.weight_mount_path else \
        ("model.path", spec.model.path)
    if allowlist.weights_root(weights) is None:
        roots = ", ".join(allowlist.weights) or "none: the cluster's allowlist has no weights directory"
        out.append(Problem(field, f"{weights!r} is mounted into every MindIE pod and must lie in one of the cluster's "
                           f"weights directories ({roots})", f"use weights below one of them, {ask}"))
    if m.scripts_dir not in allowlist.mindie_scripts:
        listed = ", ".join(allowlist.mindie_scripts) or "none: the cluster's allowlist has no mindie_scripts directory"
        out.append(Problem("mindie.scripts_dir", f"{m.scripts_dir!r} is not one of the cluster's MindIE scripts "
                           f"directories ({listed}); the deploy runs the Python found there",
                           f"use one of them, {ask}"))


def _not_for_mindie(spec: TopologySpec, out: list[Problem]) -> None:
    for field in ("kv_pool", "store", "simulation"):
        if getattr(spec, field) is not None:
            out.append(Problem(field, f"MindIE runs its own KV transfer and servers: {field} is not used by "
                               "launch_profile mindie", f"remove {field}"))
    if spec.kv_connector != "pull":
        out.append(Problem("kv_connector", "MindIE picks its own KV transfer", "remove kv_connector"))
    proxy = spec.proxy
    for field in ("policy", "hash_key", "workers", "kv_events"):
        if getattr(proxy, field) != getattr(_PROXY_DEFAULTS, field):
            out.append(Problem(f"proxy.{field}", f"the proxy of launch_profile mindie is MindIE's coordinator, which "
                               f"pdproxy's {field} does not configure",
                               f"remove proxy.{field} (coordinator settings go in mindie.extra)"))
    for inst in spec.instances:
        for field in ("extra_args", "env"):
            if getattr(inst, field):
                out.append(Problem(instance_path(spec, inst, field), f"{inst.name}: MindIE servers take no engine "
                                   f"{'flags' if field == 'extra_args' else 'env'} from the topology",
                                   "put server settings in mindie.extra (user_config.json) and env in MindIE's "
                                   "conf/mindie_env.json"))


def _extra(spec: TopologySpec, allowlist: ClusterAllowlist, out: list[Problem]) -> None:
    """mindie.extra: listed tuning keys with plain values only (mindie_extra.py); trustRemoteCode under the rule of
    --trust-remote-code: the weights (whose Python it runs) already on the nodes, in the admin's weights directories."""
    m = spec.mindie
    for path, why in extra_problems(m.extra):
        if why.endswith(IS_RENDERED):
            fix = "change the topology field it comes from (docs/mindie.md §2) and remove it from extra"
        elif why == NOT_LISTED:
            fix = ("mindie.extra takes only the tuning keys docs/mindie.md §2 lists, with plain values: nothing that "
                   "names a plugin, file, address or TLS setting")
        else:
            fix = "give a plain value of that kind"
        out.append(Problem(f"mindie.extra.{path}", why if why.endswith(IS_RENDERED) else f"{path}: {why}", fix))
    weights = m.weight_mount_path or spec.model.path
    for path in trusts_remote_code(m.extra):
        if allowlist.weights_root(weights) is None:
            out.append(Problem(f"mindie.extra.{path}", f"trustRemoteCode runs the Python that comes with the weights, "
                               f"so they must be ones already on the nodes in the cluster's weights directories, not "
                               f"{weights!r}", "use weights below one of the cluster's weights directories"))
