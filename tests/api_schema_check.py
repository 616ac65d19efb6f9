"""Every /api/ answer a test receives must be one the OpenAPI schema documents: its status listed for that
operation, and its JSON body valid against that status's schema. A mismatch fails the request's line, naming the
method, path, status and the JSON pointer that disagrees.

Loaded from tests/conftest.py; it checks every test. The schema is generated once per session (drf-spectacular's
SchemaGenerator, the one /api/schema/ serves); its OpenAPI 3.0 `nullable` becomes JSON Schema's null type.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

import pytest


@pytest.fixture(autouse=True)
def api_schema_check(monkeypatch):
    """Wraps the Django test client (and so DRF's APIClient, a subclass) for every test."""
    from django.test.client import Client

    send = Client.request

    def request_and_check(client, **environ):
        response = send(client, **environ)
        path = environ.get("PATH_INFO", "")
        if path.startswith("/api/"):
            problem = schema_mismatch(environ.get("REQUEST_METHOD", "GET"), path, response)
            if problem:
                pytest.fail(problem, pytrace=False)
        return response

    monkeypatch.setattr(Client, "request", request_and_check)
    yield


def field_errors(response) -> dict:
    """A 400's errors as {field: [messages]} (field None: not about one field), for tests to assert on."""
    out = {}
    for error in response.json()["errors"]:
        out.setdefault(error["field"], []).append(error["message"])
    return out


@lru_cache(maxsize=1)
def openapi() -> dict:
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    schema = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(schema, renderer_context={}))


@lru_cache(maxsize=1)
def _components() -> dict:
    return to_json_schema(openapi().get("components", {}))


@lru_cache(maxsize=1)
def _routes() -> list[tuple[re.Pattern, str]]:
    routes = []
    for template in openapi()["paths"]:
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        routes.append((re.compile(f"^{pattern}$"), template))
    return sorted(routes, key=lambda route: route[1].count("{"))  # a literal segment beats a parameter


def to_json_schema(node):
    """OpenAPI 3.0 schema -> JSON Schema: `nullable: true` also admits null; oneOf is read as anyOf."""
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "nullable":
            continue
        if key == "oneOf":  # drf-spectacular's oneOf alternatives may overlap ('' fits blank and email)
            key = "anyOf"
        if key in ("properties", "patternProperties") and isinstance(value, dict):
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        else:
            out[key] = to_json_schema(value)
    if node.get("nullable"):
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        out = {"anyOf": [out, {"type": "null"}]}
    return out


def _operation(method: str, path: str):
    for pattern, template in _routes():
        if pattern.match(path):
            return template, openapi()["paths"][template].get(method.lower())
    return None, None


def schema_mismatch(method: str, path: str, response) -> str | None:
    """None when the schema documents this answer; else what disagrees, naming method, path and status."""
    template, operation = _operation(method, path)
    code = str(response.status_code)
    where = f"{method} {path} -> {code}"
    if template is None:
        return None  # not a documented endpoint (the schema and docs views, the router's root)
    if operation is None:
        if code == "405":
            return _body_mismatch(where, response, {"$ref": "#/components/schemas/Error"})
        return f"{where}: the schema documents no {method} for {template}"
    responses = operation.get("responses", {})
    documented = responses.get(code) or responses.get(f"{code[0]}XX") or responses.get("default")
    if documented is None:
        return f"{where}: status {code} is not documented for {method} {template} (documented: {sorted(responses)})"
    media = documented.get("content", {})
    content_type = response.get("Content-Type", "") if hasattr(response, "get") else ""
    if "json" not in content_type or getattr(response, "streaming", False):
        return None  # YAML/CSV downloads, empty 204s: the status is all there is to check
    schema = (media.get("application/json") or {}).get("schema")
    if schema is None:
        if response.content.strip():
            return f"{where}: the schema documents no JSON body for this status, but one came"
        return None
    return _body_mismatch(where, response, schema)


def _body_mismatch(where: str, response, schema: dict) -> str | None:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import relevance

    try:
        body = json.loads(response.content or b"null")
    except ValueError as exc:
        return f"{where}: the body is not JSON ({exc})"
    validator = Draft202012Validator({**to_json_schema(schema), "components": _components()})
    errors = sorted(validator.iter_errors(body), key=relevance, reverse=True)
    if not errors:
        return None
    lines = [f"{where}: the body does not match the schema"]
    for error in errors[:5]:
        pointer = "/" + "/".join(str(part) for part in error.absolute_path)
        schema_pointer = "/" + "/".join(str(part) for part in error.absolute_schema_path)
        lines.append(f"  at {pointer} (schema {schema_pointer}): {error.message[:300]}")
    return "\n".join(lines)
