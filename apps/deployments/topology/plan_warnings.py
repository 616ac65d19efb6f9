"""What renders but may not mean what was written, or carries a hazard the operator should choose knowingly; shown
with the plan, never blocking a deploy."""

from __future__ import annotations

from .hbm_rules import fit_warnings
from .node_facts import NodeFacts
from .problem import Problem, instance_path
from .spec import TopologySpec

MOONCAKE_CLIENT_TTL_S = 120  # the master's --client_ttl (the KV pool guide's value), rendered by profiles/vllm_ascend.py


def plan_warnings(spec: TopologySpec, nodes: dict[str, NodeFacts] | None = None) -> list[Problem]:
    """`nodes` adds the HBM fit's warnings (a tight instance, or why the check could not run)."""
    return env_warnings(spec) + pool_warnings(spec) + (fit_warnings(spec, nodes) if nodes is not None else [])


def env_warnings(spec: TopologySpec) -> list[Problem]:
    """A plain env value holding `$` is passed literally."""
    out = []
    for inst in spec.instances:
        for name, value in inst.env.items():
            if isinstance(value, str) and "$" in value:
                out.append(Problem(instance_path(spec, inst, f"env.{name}"), f"{inst.name}: {name} holds a literal "
                                   f"'$' ({value!r}); it is passed as written, not expanded on the node",
                                   f"to keep the node's {name}, write {{prepend: ..}} or {{append: ..}} instead"))
    return out


def pool_warnings(spec: TopologySpec) -> list[Problem]:
    """A Mooncake master keeps listing a dead store client's blocks until client_ttl; a Prefill that then looks a
    shared prefix up finds them, cannot load them, and vLLM's default policy fails the request (measured with the
    real mooncake_master: tests/simcluster/test_pool_recovery.py, tests/deployments/test_docs_examples_deploy_sim.py)."""
    pool = spec.kv_pool
    if not pool or pool.backend != "mooncake" or pool.load_failure_policy == "recompute":
        return []
    policy = "fail" if pool.load_failure_policy else "fail, vLLM's default"
    return [Problem("kv_pool.load_failure_policy", f"when an engine stops without unmounting its pool segment "
                    f"(killed, crashed, restarted), the master lists its blocks for up to {MOONCAKE_CLIENT_TTL_S} s; "
                    f"a request sharing their prefix finds them, cannot load them and fails "
                    f"(kv_load_failure_policy {policy})",
                    "set kv_pool.load_failure_policy: recompute to compute such a prefix again instead")]
