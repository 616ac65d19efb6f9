"""A viewset's class-level queryset is shared by every request thread (DRF clones the outer query, not the queries
of its Subquery annotations). Compiling such a subquery must not add joins to it: the join's reference count is
raised and reset while compiling, so two threads compiling at once could write `ORDER BY U1."name"` without U1
in FROM. Under load one request in a few hundred to /api/deployments/<id>/ failed so (missing FROM-clause entry
for table "u1", test_rest_api_load.py) while the active revision's subquery ordered by Revision's Meta ordering
(the deployment, so its name)."""

import pytest
from django.db import connection
from django.db.models import Subquery
from django.db.models.sql.query import Query

from controlplane.api_urls import router


def subqueries(expression, found: list) -> list:
    if isinstance(expression, Subquery):
        found.append(expression.query)
    for inner in expression.get_source_expressions():
        if inner is not None:
            subqueries(inner, found)
    return found


def shared_querysets() -> dict[str, object]:
    return {prefix: viewset.queryset for prefix, viewset, _ in router.registry
            if getattr(viewset, "queryset", None) is not None}


@pytest.mark.django_db
def test_compiling_a_shared_queryset_adds_no_join_to_its_subqueries(monkeypatch, figure):
    querysets = shared_querysets()
    shared = {id(q): prefix for prefix, queryset in querysets.items()
              for a in queryset.query.annotations.values() for q in subqueries(a, [])}
    joined = []
    setup_joins = Query.setup_joins

    def recording(self, *args, **kwargs):
        if id(self) in shared:
            joined.append((shared[id(self)], args[0]))
        return setup_joins(self, *args, **kwargs)

    monkeypatch.setattr(Query, "setup_joins", recording)
    for queryset in querysets.values():
        queryset.all().query.get_compiler(connection=connection).as_sql()
    assert joined == [], f"compiling joins inside a shared subquery (/api/<prefix>/, joined names): {joined}"
    with_subqueries = sorted(set(shared.values()))
    figure("api-shared-querysets-compile-clean",
           held="compiling each API viewset's class-level queryset adds no join to the queries of its Subquery "
                "annotations (shared by every request thread)",
           figure=f"{len(querysets)} viewset querysets compiled, {len(shared)} subqueries in "
                  f"{', '.join(with_subqueries) or 'none'}: 0 joins added",
           command='make test PYTEST_ARGS="tests/reliability/test_shared_querysets.py"',
           values={"viewsets": sorted(querysets), "subqueries": len(shared), "with_subqueries": with_subqueries})
