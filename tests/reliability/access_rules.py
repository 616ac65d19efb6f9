"""Who may call what: every URL pattern and websocket route the control plane serves, found by walking its URL
resolvers (never listed by hand), and the rule table naming the least role each route and method needs.

`coverage_problems()` names every route the walk finds without a rule, and every rule naming no route: a new
endpoint fails tests/reliability/test_access_matrix.py until someone decides who may call it.

Rule keys: `namespace:name` of the URL (`deployments:detail`, `node-discover`), the pattern itself for an unnamed
one, `ws:<pattern>` for a websocket route, and `<prefix>*` for every pattern below a prefix (the Django admin
site, which checks is_staff itself). A format-suffix variant (`node-list .<format>`: /api/nodes.json) runs the same
view as its base route and takes its rule; the matrix still calls it. A rule is a level for every method, or a
dict of levels by method: function views are called with GET and POST, class-based ones with the methods they serve.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANONYMOUS, VIEWER, OPERATOR, ADMIN = "anonymous", "viewer", "operator", "admin"
STAFF = "staff"  # Django's admin site: is_staff users only, which none of the four roles makes
NOBODY = "nobody"  # the view does not serve this method: everyone is refused (405, or the login first)
IDENTITIES = (ANONYMOUS, VIEWER, OPERATOR, ADMIN)
RANK = {ANONYMOUS: 0, VIEWER: 1, OPERATOR: 2, ADMIN: 3, STAFF: 4, NOBODY: 5}

FUNCTION_VIEW_METHODS = ("GET", "POST")
CLASS_VIEW_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
FORMAT_SUFFIX = " .<format>"

POST_ONLY_OPERATOR = {"GET": NOBODY, "POST": OPERATOR}  # @require_POST outside @operator_required
LIST_VIEWER_CREATE_ADMIN = {"GET": VIEWER, "POST": ADMIN}
DETAIL_VIEWER_CHANGE_ADMIN = {"GET": VIEWER, "PUT": ADMIN, "PATCH": ADMIN, "DELETE": ADMIN}

RULES: dict[str, str | dict[str, str]] = {
    # Django's admin site (apps/*/admin.py): AdminSite.admin_view sends anyone not is_staff to its login page.
    "admin/*": STAFF,
    "admin:login": ANONYMOUS,
    # Pages (apps/*/views.py, apps/accounts/access.py): LoginRequiredEverywhereMiddleware, then the decorator.
    "ui:login": ANONYMOUS,
    "ui:logout": VIEWER,  # POST only (Django's LogoutView)
    "ui:dashboard": VIEWER,
    "ui:overview": VIEWER,
    "control-plane-metrics": {"GET": VIEWER, "POST": NOBODY},
    "audit:list": VIEWER,
    "jobs:list": VIEWER,
    "jobs:detail": VIEWER,
    "jobs:cancel": POST_ONLY_OPERATOR,
    "inventory:cluster": VIEWER,
    "inventory:cluster-discover": POST_ONLY_OPERATOR,
    "inventory:node": VIEWER,
    "inventory:node-npus": VIEWER,
    "inventory:node-discover": POST_ONLY_OPERATOR,
    "inventory:node-host-key": ADMIN,
    "inventory:import": ADMIN,
    "inventory:export": VIEWER,
    "deployments:list": VIEWER,
    "deployments:new": OPERATOR,
    "deployments:detail": VIEWER,
    "deployments:edit": OPERATOR,
    "deployments:edit-form": OPERATOR,
    "deployments:plan": VIEWER,
    "deployments:diff": VIEWER,
    "deployments:export": VIEWER,
    "deployments:activate": POST_ONLY_OPERATOR,
    "deployments:playground": {"GET": VIEWER, "POST": OPERATOR},
    "deployments:job": POST_ONLY_OPERATOR,
    "deployments:process-log": VIEWER,
    "telemetry:topology-json": VIEWER,
    "telemetry:instance": VIEWER,
    "telemetry:service-charts": VIEWER,
    "telemetry:health-policy": {"GET": VIEWER, "POST": OPERATOR},
    "evals:list": VIEWER,
    "evals:new": OPERATOR,
    "evals:compare": VIEWER,
    "evals:import": OPERATOR,
    "evals:advisor": VIEWER,
    "evals:detail": VIEWER,
    "evals:state": VIEWER,
    "evals:cancel": POST_ONLY_OPERATOR,
    "evals:resume": POST_ONLY_OPERATOR,
    "evals:download": VIEWER,
    "evals:sweeps": VIEWER,
    "evals:sweep-new": OPERATOR,
    "evals:sweep": VIEWER,
    "evals:datasets": VIEWER,
    "evals:dataset-upload": POST_ONLY_OPERATOR,
    # REST (apps/accounts/permissions.py): reads viewer, role_for_action / write_role, else writes admin.
    "api-root": VIEWER,
    "api-token": ANONYMOUS,
    "api-me": VIEWER,
    "api-my-token": VIEWER,
    "api-schema": VIEWER,
    "api-docs": VIEWER,
    "api-redoc": VIEWER,
    "api-inventory-import": ADMIN,
    "api-inventory-export": VIEWER,
    "api-workers": VIEWER,
    "api-prometheus-sd": VIEWER,
    "cluster-list": LIST_VIEWER_CREATE_ADMIN,
    "cluster-detail": DETAIL_VIEWER_CHANGE_ADMIN,
    "node-list": LIST_VIEWER_CREATE_ADMIN,
    "node-detail": DETAIL_VIEWER_CHANGE_ADMIN,
    "node-discover": OPERATOR,
    "node-fetch-host-key": ADMIN,
    "node-pin-host-key": ADMIN,
    "npu-list": VIEWER,
    "npu-detail": VIEWER,
    "sshcredential-list": LIST_VIEWER_CREATE_ADMIN,
    "sshcredential-detail": DETAIL_VIEWER_CHANGE_ADMIN,
    "job-list": VIEWER,
    "job-detail": VIEWER,
    "job-events": VIEWER,
    "job-cancel": OPERATOR,
    "auditentry-list": VIEWER,
    "auditentry-detail": VIEWER,
    "user-list": ADMIN,
    "user-detail": ADMIN,
    "deployment-list": {"GET": VIEWER, "POST": OPERATOR},
    "deployment-detail": {"GET": VIEWER, "PUT": OPERATOR, "PATCH": OPERATOR, "DELETE": ADMIN},
    "deployment-revisions": {"GET": VIEWER, "POST": OPERATOR},
    "deployment-activate": OPERATOR,
    "deployment-preflight": OPERATOR,
    "deployment-deploy": OPERATOR,
    "deployment-stop": OPERATOR,
    "deployment-refresh": OPERATOR,
    "deployment-restart": OPERATOR,
    "deployment-rolling-restart": OPERATOR,
    "deployment-plan": VIEWER,
    "deployment-diff": VIEWER,
    "deployment-export": VIEWER,
    "deployment-topology": VIEWER,
    "deployment-history": VIEWER,
    "deployment-health": VIEWER,
    "deployment-health-policy": {"GET": VIEWER, "PUT": OPERATOR},
    "deployment-playground": OPERATOR,
    "revision-list": VIEWER,
    "revision-detail": VIEWER,
    "process-list": VIEWER,
    "process-detail": VIEWER,
    "process-log": VIEWER,
    "eval-run-list": {"GET": VIEWER, "POST": OPERATOR},
    "eval-run-detail": VIEWER,
    "eval-run-cancel": OPERATOR,
    "eval-run-resume": OPERATOR,
    "eval-run-samples": VIEWER,
    "eval-sweep-list": {"GET": VIEWER, "POST": OPERATOR},
    "eval-sweep-detail": VIEWER,
    "eval-dataset-list": {"GET": VIEWER, "POST": OPERATOR},
    "eval-compare": VIEWER,
    "eval-import": OPERATOR,
    "eval-advisor": VIEWER,
    # Websockets (controlplane/routing.py, apps/realtime/object_socket.py): read-only, viewer and an existing row.
    "ws:ws/jobs/<int:job_id>/": VIEWER,
    "ws:ws/deployments/<int:deployment_id>/": VIEWER,
    "ws:ws/evalruns/<int:run_id>/": VIEWER,
}


@dataclass(frozen=True)
class Route:
    key: str  # what the rule table names (format variants: the base key + FORMAT_SUFFIX)
    pattern: str  # the full pattern, each level's text joined
    regexes: tuple[str, ...]  # each level's regex, to build a URL from
    callback: object
    methods: tuple[str, ...]  # HTTP methods the matrix sends; ("WS",) for a websocket route
    websocket: bool = False

    @property
    def base_key(self) -> str:
        return self.key.removesuffix(FORMAT_SUFFIX)


def view_methods(callback) -> tuple[str, ...]:
    """The methods a view serves: a DRF viewset's action map, a class view's handlers, else GET and POST."""
    actions = getattr(callback, "actions", None)
    if actions:
        return tuple(m.upper() for m in actions if m.upper() in CLASS_VIEW_METHODS)  # DRF adds "head" later
    cls = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if cls is None:
        return FUNCTION_VIEW_METHODS
    return tuple(m for m in CLASS_VIEW_METHODS if m.lower() in cls.http_method_names and hasattr(cls, m.lower()))


def _walk(patterns, levels=(), namespace=""):
    from django.urls import URLResolver

    for entry in patterns:
        if isinstance(entry, URLResolver):
            inner = ":".join(filter(None, [namespace, entry.namespace])) if entry.namespace else namespace
            yield from _walk(entry.url_patterns, (*levels, entry), inner)
        else:
            yield (*levels, entry), namespace


def http_routes(urlconf: str | None = None) -> list[Route]:
    """Every URL pattern below the root URLconf (or `urlconf`), one Route each."""
    from django.urls import get_resolver

    routes = []
    for chain, namespace in _walk(get_resolver(urlconf).url_patterns):
        pattern = "".join(str(level.pattern) for level in chain)
        leaf = chain[-1]
        key = f"{namespace}:{leaf.name}" if namespace and leaf.name else leaf.name or pattern
        if any("format" in level.pattern.regex.groupindex for level in chain):
            key += FORMAT_SUFFIX
        routes.append(Route(key=key, pattern=pattern, regexes=tuple(level.pattern.regex.pattern for level in chain),
                            callback=leaf.callback, methods=view_methods(leaf.callback)))
    return routes


def websocket_routes() -> list[Route]:
    from controlplane.routing import websocket_urlpatterns

    return [Route(key=f"ws:{p.pattern}", pattern=str(p.pattern), regexes=(p.pattern.regex.pattern,),
                  callback=p.callback, methods=("WS",), websocket=True) for p in websocket_urlpatterns]


def all_routes(urlconf: str | None = None) -> list[Route]:
    return http_routes(urlconf) + websocket_routes()


def _rule_entry(route: Route, rules: dict):
    if route.base_key in rules:
        return rules[route.base_key]
    prefixes = [k for k in rules if k.endswith("*") and route.pattern.startswith(k[:-1])]
    return rules[max(prefixes, key=len)] if prefixes else None


def rule_for(route: Route, method: str, rules: dict | None = None) -> str | None:
    """The least identity that may send `method` to `route`; None when the table has no rule for it."""
    entry = _rule_entry(route, RULES if rules is None else rules)
    return entry.get(method) if isinstance(entry, dict) else entry


def coverage_problems(routes: list[Route], rules: dict | None = None) -> list[str]:
    """Every route and method without a rule, every duplicate key, and every rule naming no route (or method)."""
    rules = RULES if rules is None else rules
    problems, seen, used = [], {}, set()
    for route in routes:
        if route.key in seen:
            problems.append(f"two routes share the key {route.key!r}: {seen[route.key]} and {route.pattern}")
        seen[route.key] = route.pattern
        for method in route.methods:
            level = rule_for(route, method, rules)
            if level is None:
                problems.append(f"no access rule for {method} {route.key!r} ({route.pattern}): add one to "
                                f"tests/reliability/access_rules.py")
            elif level not in RANK:
                problems.append(f"unknown level {level!r} for {method} {route.key!r}")
        used.add(route.base_key)
        used.update(k for k in rules if k.endswith("*") and route.pattern.startswith(k[:-1]))
    for key, entry in rules.items():
        if key not in used:
            problems.append(f"the access rule {key!r} names no route any more: remove it")
        elif isinstance(entry, dict):
            served = {m for r in routes if r.base_key == key for m in r.methods}
            problems.extend(f"the access rule {key!r} names {m}, which the route does not serve"
                            for m in sorted(set(entry) - served))
    return problems


_GROUP = re.compile(r"\(\?P<(\w+)>((?:[^()]|\([^()]*\))*)\)")


def build_path(route: Route, values: dict[str, str]) -> str:
    """A path matching `route`: each named group replaced by values[name] (a group that starts with a literal dot,
    as DRF's format suffix converter, gets the dot too)."""

    def fill(match):
        name, body = match.group(1), match.group(2)
        return ("." if body.startswith("\\.") else "") + str(values[name])

    parts = []
    for regex in route.regexes:
        text = regex.removeprefix("^")
        text = re.sub(r"(\\Z|\$)$", "", text)
        text = _GROUP.sub(fill, text).replace("/?", "").replace("\\.", ".").replace("\\-", "-")
        parts.append(text)
    return "/" + "".join(parts)
