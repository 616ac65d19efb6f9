"""Rules on what an instance adds to its engine's command line and environment (extra_args, env): nothing the
profile renders from the topology, and only what the profile allows (profiles/engine_options.py); and on the
simulation block, which only the sim profile renders into the engines' env."""

from __future__ import annotations

import re
from collections.abc import Mapping

from sshexec import EnvExtend

from .problem import Problem, instance_path
from .profiles import get_profile
from .profiles.engine_options import PATH_ENV, REMOTE_CODE_FLAG
from .profiles.sim import ANSWER_BOOKS
from .spec import TopologySpec

_ABSOLUTE_PATH = re.compile(r"^/[A-Za-z0-9_.+@/-]*$")


def _owned_flag(token: str, owned_flags: Mapping[str, str]) -> str | None:
    """The owned flag `token` would set: itself, or one it abbreviates (argparse accepts unique prefixes)."""
    if not token.startswith("--"):
        return None
    name = token.split("=", 1)[0]
    if name in owned_flags:
        return name
    if len(name) > 3:
        return next((flag for flag in owned_flags if flag.startswith(name)), None)
    return None


def engine_owned(spec: TopologySpec, out: list[Problem]) -> None:
    """Flags and env the profile derives from spec fields (kv_role from role, sizes from tp/dp, devices...)
    cannot be overridden, so kv_producer/kv_consumer and the extra_config sizes always match the instances."""
    profile = get_profile(spec.launch_profile)
    for inst in spec.instances:
        for k, token in enumerate(inst.extra_args):
            owned = _owned_flag(token, profile.owned_flags)
            if owned:
                out.append(Problem(instance_path(spec, inst, f"extra_args[{k}]"), f"{inst.name}: {token} is rendered "
                                   "from the topology", f"remove it and set {profile.owned_flags[owned]}"))
        for name in inst.env:
            if name in profile.owned_env:
                out.append(Problem(instance_path(spec, inst, f"env.{name}"), f"{inst.name}: {name} is rendered from "
                                   "the topology", f"remove it and set {profile.owned_env[name]}"))
        if inst.dp > 1 and inst.dp_rpc_port is None:
            out.append(Problem(instance_path(spec, inst, "dp_rpc_port"), f"{inst.name}: DP{inst.dp} needs a DP rpc port "
                               "for its ranks to meet", "set dp_rpc_port, e.g. 12321"))


def engine_allowed(spec: TopologySpec, out: list[Problem]) -> None:
    """An operator chooses among the profile's flags and env names (profiles/engine_options.py), so nothing an
    instance sets can make a node run another program or load other code. Owned ones are reported above."""
    profile = get_profile(spec.launch_profile)
    flags = ", ".join(sorted(profile.allowed_flags))
    for inst in spec.instances:
        args = inst.extra_args
        for k, token in enumerate(args):
            if not token.startswith("--") or _owned_flag(token, profile.owned_flags):
                continue
            value = args[k + 1] if k + 1 < len(args) and not args[k + 1].startswith("--") else None
            rule = profile.allowed_flags.get(token)
            if rule is None:
                out.append(Problem(instance_path(spec, inst, f"extra_args[{k}]"), f"{inst.name}: {token} is not an engine "
                                   f"flag the {profile.name} profile allows", f"remove it; allowed: {flags}"))
                continue
            problem = rule.value_problem(token, value)
            if problem:
                where = f"extra_args[{k + 1}]" if value is not None else f"extra_args[{k}]"
                fix = "add" if value is None else "remove" if rule.kind == "switch" else "change"
                out.append(Problem(instance_path(spec, inst, where), f"{inst.name}: {problem}", f"{fix} the value after {token}"))
            if token == REMOTE_CODE_FLAG and not spec.model.path.startswith("/"):
                out.append(Problem(instance_path(spec, inst, f"extra_args[{k}]"), f"{inst.name}: {token} runs Python "
                                   f"shipped with the model, and model.path {spec.model.path!r} is not a directory "
                                   "on the nodes (a hub id would be fetched and its code run)",
                                   "put the weights on the nodes and set model.path to their absolute path, or "
                                   f"remove {token}"))
        allowed_env = ", ".join(sorted(profile.allowed_env))
        for name, value in inst.env.items():
            path = instance_path(spec, inst, f"env.{name}")
            if name not in profile.owned_env and name not in profile.allowed_env:
                out.append(Problem(path, f"{inst.name}: env {name} is not one the "
                                   f"{profile.name} profile lets an instance set", f"remove it; allowed: {allowed_env}"))
            elif name in PATH_ENV:
                _path_env(inst.name, name, value, path, out)


def _path_env(inst_name: str, name: str, value, path: str, out: list[Problem]) -> None:
    if not isinstance(value, EnvExtend):
        out.append(Problem(path, f"{inst_name}: {name} would replace the node's own value", f"write it as "
                           f"{{prepend: /dir}} or {{append: /dir}}, which keeps the node's {name}"))
        return
    for part in (value.prepend, value.append):
        for item in filter(None, part.split(value.separator)):
            if not _ABSOLUTE_PATH.match(item) or "/../" in f"{item}/" or "/./" in f"{item}/":
                out.append(Problem(path, f"{inst_name}: {name} entry {item!r} is not an absolute path",
                                   "give absolute paths on the node, like /usr/local/lib/mooncake"))


def simulation_rules(spec: TopologySpec, out: list[Problem]) -> None:
    """The simulated model's answers (simcluster/answer_books) mean nothing to a real engine."""
    sim = spec.simulation
    if sim is None:
        return
    if spec.launch_profile != "sim":
        out.append(Problem("simulation", f"the simulation block sets what the simulated model answers, but "
                           f"launch_profile is {spec.launch_profile}", "remove the simulation block, or set "
                           "launch_profile: sim"))
    if sim.answer_book not in ANSWER_BOOKS:
        out.append(Problem("simulation.answer_book", f"no answer book named {sim.answer_book!r}",
                           f"use one of: {', '.join(ANSWER_BOOKS)}"))
