"""What renders but may not mean what was written; shown with the plan, never blocking a deploy."""

from __future__ import annotations

from .problem import Problem, instance_path
from .spec import TopologySpec


def env_warnings(spec: TopologySpec) -> list[Problem]:
    """What renders but may not mean what was written: a plain env value holding `$` is passed literally."""
    out = []
    for inst in spec.instances:
        for name, value in inst.env.items():
            if isinstance(value, str) and "$" in value:
                out.append(Problem(instance_path(spec, inst, f"env.{name}"), f"{inst.name}: {name} holds a literal "
                                   f"'$' ({value!r}); it is passed as written, not expanded on the node",
                                   f"to keep the node's {name}, write {{prepend: ..}} or {{append: ..}} instead"))
    return out
