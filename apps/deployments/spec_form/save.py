"""Saving the form: validation problems (spec paths) placed back on the form fields they name, and the save itself
through the same revision_create as the YAML editor."""

from __future__ import annotations

import re

from ..revision_checks import RevisionInvalid, checked_spec, name_problem
from ..services import revision_create
from .state import (
    INSTANCE_KEPT,
    KV_POOL_KEPT,
    TOP_BOOLS,
    TOP_INTS,
    TOP_TEXT,
    FormProblem,
    FormState,
    Placement,
)
from .to_data import state_to_data

_SPEC_ROW = re.compile(r"^(instances|store\.servers)\[(\d+)\](?:\.([a-z_]+))?")


def field_of(path: str, placement: Placement) -> str:
    """The form field a spec path belongs to: instances[2].tp -> instances[<its form row>].tp; nodes and
    nodes[1] -> that row's node cell (it lists them all); a kept field (devices, extra_args[3], env.X) -> that
    row's read-only cell; a path the form has no field for -> ""."""
    m = _SPEC_ROW.match(path)
    if m:
        rows = placement.instance_rows if m.group(1) == "instances" else placement.server_rows
        index = int(m.group(2))
        if index >= len(rows):
            return m.group(1)
        row, name = rows[index], m.group(3)
        if not name:
            return f"{m.group(1)}[{row}]"
        if m.group(1) == "instances" and name in INSTANCE_KEPT:
            name = "keep"
        elif m.group(1) == "instances" and name == "nodes":
            name = "node"
        return f"{m.group(1)}[{row}].{name}"
    kept_pool = tuple(f"kv_pool.{k}" for k in KV_POOL_KEPT)
    if path.startswith(("transfer_ports", "store.memory_mb", "proxy.admin_port", "proxy.kv_events", "simulation",
                        "kv_connector")
                       + kept_pool):
        return "keep"
    if path in TOP_TEXT + TOP_INTS + TOP_BOOLS or path in ("instances", "store.servers"):
        return path
    if path in ("model.profile", "model"):
        return "model.path"
    if path in ("kv_pool", "proxy", "store", "bench_client"):
        return {"kv_pool": "kv_pool.node", "proxy": "proxy.node", "store": "store.servers",
                "bench_client": "bench_client.node"}[path]
    return ""


def placed_problems(problems, data: dict, placement: Placement) -> list[FormProblem]:
    """Validation Problems (spec paths) as FormProblems on the form fields they name."""
    out = []
    for problem in problems:
        named = name_problem(problem, data)
        label = named.path
        if named.instance:
            label = f"instance {named.instance}" + (f".{named.field}" if named.field else "")
        out.append(FormProblem(field_of(problem.path, placement), label, problem.message, problem.suggestion))
    return out


def spec_form_save(*, deployment, user, state: FormState, comment: str = "", activate: bool = False):
    """(the new revision, []) or (None, every problem on its field). A field that is not a number stops the save,
    but the rest is still checked so the operator sees all it can at once (the topology rules need every
    required number, so they only run when those read)."""
    data, problems, placement = state_to_data(state)
    try:
        if problems:
            checked_spec(cluster=deployment.cluster, deployment_id=deployment.pk, deployment_name=deployment.name,
                         data=data)
            return None, problems
        return revision_create(deployment=deployment, user=user, data=data, comment=comment,
                               activate=activate), []
    except RevisionInvalid as exc:
        typed = {p.field for p in problems}  # a typing error explains its field better than "missing"
        return None, problems + [p for p in placed_problems(exc.problems, data, placement) if p.field not in typed]
