"""Validation of a revision against the inventory and the other deployments, as Problems that name the field.

A problem's `path` stays the spec path (instances[0].dp) for tooling; `instance` and `field` name the instance
by its name, which is what an operator reads (and what the API returns).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .claims import held_by_others, overlap_problems
from .inventory_lookup import cluster_allowlist, cluster_nodes, node_facts
from .topology import (
    Problem,
    SpecError,
    TopologySpec,
    normal_run_dir,
    spec_from_dict,
    spec_from_yaml,
    validate_topology,
)

_INSTANCE_PATH = re.compile(r"^instances\[(\d+)\](?:\.(.+))?$")
_RUN_DIR_RE = re.compile(r"^/[A-Za-z0-9._/-]+$")


class RevisionInvalid(ValueError):
    """The spec cannot be saved or run; `problems` say where and what to change."""

    def __init__(self, problems: list[Problem], spec: TopologySpec | None = None):
        self.problems = problems
        self.spec = spec
        super().__init__("; ".join(map(str, problems)))


@dataclass(frozen=True)
class NamedProblem:
    path: str
    instance: str | None
    field: str
    message: str
    suggestion: str

    def as_dict(self) -> dict:
        return {"path": self.path, "instance": self.instance, "field": self.field, "message": self.message,
                "suggestion": self.suggestion}


def spec_errors_as_problems(exc: SpecError) -> list[Problem]:
    return [Problem(path or "spec", message, "") for path, message in exc.errors]


def name_problem(problem: Problem, data: dict | None) -> NamedProblem:
    """instances[2].tp -> instance d0, field tp (from the submitted data, so parse errors get names too)."""
    match = _INSTANCE_PATH.match(problem.path)
    instance, field = None, problem.path
    if match:
        field = match.group(2) or ""
        try:
            instance = str(data["instances"][int(match.group(1))]["name"])
        except (KeyError, IndexError, TypeError, ValueError):
            instance = f"#{match.group(1)}"
    return NamedProblem(problem.path, instance, field, problem.message, problem.suggestion)


def parse_spec(*, yaml_text: str | None = None, data: dict | None = None,
               deployment_name: str | None = None) -> TopologySpec:
    """YAML text or plain data -> spec; SpecError becomes RevisionInvalid. An omitted run_dir is named after the
    deployment (topology/parse.py)."""
    try:
        if yaml_text is not None:
            return spec_from_yaml(yaml_text, deployment_name=deployment_name)
        return spec_from_dict(data, deployment_name=deployment_name)
    except SpecError as exc:
        raise RevisionInvalid(spec_errors_as_problems(exc)) from None


def _run_dir_problems(spec: TopologySpec, others: list) -> list[Problem]:
    """run_dir against the other deployments' active revisions (`others`)."""
    run_dir = spec.run_dir
    if not _RUN_DIR_RE.match(run_dir):
        return [Problem("run_dir", f"run_dir {run_dir!r} must be an absolute path of letters, digits, '.', "
                        "'_', '-' and '/'", "use e.g. /var/lib/pdcp/<deployment name>")]
    out = []
    for other in others:
        theirs = _stored_run_dir(other.spec)
        relation = _nesting(run_dir, theirs) if theirs else None
        if relation is None:
            continue
        name = other.deployment.name
        if relation == "same":
            message = f"deployment {name} already uses run_dir {theirs} on this cluster (pid files would collide)"
            fix = f"use another directory, e.g. {run_dir}-2"
        elif relation == "inside":
            message = (f"run_dir {run_dir} lies inside deployment {name}'s run_dir {theirs}: on this cluster no "
                       "deployment's run dir may contain another's")
            fix = f"use a directory outside {theirs}"
        else:
            message = (f"run_dir {run_dir} contains deployment {name}'s run_dir {theirs}: on this cluster no "
                       "deployment's run dir may contain another's")
            fix = f"use a directory beside {theirs}, e.g. {theirs}-2"
        out.append(Problem("run_dir", message, fix))
    return out


def _stored_run_dir(data: dict) -> str | None:
    """A stored revision's run_dir in today's spelling (revisions saved before normalisation kept theirs)."""
    try:
        return normal_run_dir(str(data.get("run_dir") or ""))
    except ValueError:
        return None


def _nesting(mine: str, theirs: str) -> str | None:
    """same | inside (mine below theirs) | contains | None; both already normalised."""
    if mine == theirs:
        return "same"
    if mine.startswith(theirs + "/"):
        return "inside"
    if theirs.startswith(mine + "/"):
        return "contains"
    return None


def validate_spec(spec: TopologySpec, *, cluster, deployment_id: int | None = None) -> list[Problem]:
    """Everything a revision must pass: the topology rules against the cluster's inventory, then against the
    cluster's other deployments (never this one, `deployment_id`, with its own revisions): run_dir, and the NPU
    dies and ports they hold (claims.py). Queries: the inventory, the others' active revisions, their processes."""
    from .models import Revision

    inventory = cluster_nodes(cluster)
    facts_by_profile: dict[str, dict] = {}

    def facts_for(profile: str) -> dict:
        if profile not in facts_by_profile:
            facts_by_profile[profile] = {name: node_facts(n, launch_profile=profile) for name, n in inventory.items()}
        return facts_by_profile[profile]

    facts = facts_for(spec.launch_profile)
    others = list(Revision.objects.filter(is_active=True, deployment__cluster=cluster)
                  .exclude(deployment_id=deployment_id).select_related("deployment").order_by("deployment__name"))
    allowlist = cluster_allowlist(cluster)
    held = held_by_others(cluster, deployment_id, active=others, facts_for=facts_for, allowlist=allowlist)
    return validate_topology(spec, facts, allowlist) + _run_dir_problems(spec, others) + overlap_problems(spec, facts, held)


def checked_spec(*, cluster, deployment_id: int | None = None, deployment_name: str | None = None,
                 yaml_text: str | None = None, data: dict | None = None) -> TopologySpec:
    spec = parse_spec(yaml_text=yaml_text, data=data, deployment_name=deployment_name)
    problems = validate_spec(spec, cluster=cluster, deployment_id=deployment_id)
    if problems:
        raise RevisionInvalid(problems, spec)
    return spec
