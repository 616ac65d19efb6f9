"""The API's one error shape, for every 4xx and the 500 (docs/contracts.md, "API errors"):

    {"detail": "<one-line summary>", "errors": [{"field": "<dotted path> | null", "message": "...", ...}]}

A 400 lists what is wrong, each naming the field by its path in the body (`instances[0].tp`, the spelling the
deployments problems and the inventory file already use); other statuses have `"errors": []`. Anything unexpected
becomes a 500 with an id, never a traceback. `ErrorSerializer` documents the shape, and `add_error_responses`
(a drf-spectacular postprocessing hook) makes it every operation's error answer in the OpenAPI schema.
"""

import logging
import uuid
from collections.abc import Mapping

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, IntegrityError
from django.http import JsonResponse
from django.views import defaults
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler

logger = logging.getLogger(__name__)

_NOT_A_FIELD = {api_settings.NON_FIELD_ERRORS_KEY, "detail"}


class ErrorItemSerializer(serializers.Serializer):
    field = serializers.CharField(allow_null=True, help_text="where in the request: a dotted path "
                                                             "(instances[0].tp); null when not about one field")
    message = serializers.CharField()


class ErrorSerializer(serializers.Serializer):
    """Every 4xx and 5xx answer of the API. Items may carry more keys: `line` (inventory files), `path`, `instance`
    and `suggestion` (topology specs)."""

    detail = serializers.CharField(help_text="one line saying what went wrong")
    errors = ErrorItemSerializer(many=True, help_text="what to fix, one entry each; empty unless the status is 400")


class Conflict(APIException):
    """Raise it from a view: a 409 in the Error shape (the action does not fit the object's state)."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "conflicts with the object's state"
    default_code = "conflict"


class BadGateway(APIException):
    """Raise it from a view: a 502 in the Error shape (a node or service behind the API did not answer)."""

    status_code = status.HTTP_502_BAD_GATEWAY
    default_detail = "a node or service behind the control plane did not answer"
    default_code = "bad_gateway"


def error_response(detail: str, status_code: int) -> Response:
    """A non-400 error answer in the Error shape, for a view that returns rather than raises."""
    return Response(error_body(detail), status=status_code)


def error_body(detail: str, errors: list[dict] | None = None) -> dict:
    return {"detail": " ".join(str(detail).split()), "errors": list(errors or [])}


def summary(errors: list[dict], prefix: str = "") -> str:
    """One line: the first error, and how many more."""
    if not errors:
        return prefix.rstrip(": ") or "invalid request"
    first = errors[0]
    text = f"{first['field']}: {first['message']}" if first.get("field") else str(first["message"])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{prefix}{text}{more}"


def invalid_response(errors: list[dict], prefix: str = "", detail: str | None = None) -> Response:
    """A 400 listing `errors` (each a dict with at least field and message); `detail` defaults to the first."""
    return Response(error_body(detail or summary(errors, prefix), errors), status=status.HTTP_400_BAD_REQUEST)


def flatten_errors(detail, path: str = "") -> list[dict]:
    """DRF's nested {field: [messages]} / [messages] / [{...}, {}] -> [{field: "a.b[0].c", message}]."""
    if isinstance(detail, Mapping):
        out = []
        for key, value in detail.items():
            if isinstance(key, int) or (isinstance(key, str) and key.isdecimal()):
                out += flatten_errors(value, f"{path}[{key}]")
            elif key in _NOT_A_FIELD:
                out += flatten_errors(value, path)
            else:
                out += flatten_errors(value, f"{path}.{key}" if path else str(key))
        return out
    if isinstance(detail, list | tuple):
        if all(not isinstance(item, Mapping | list | tuple) for item in detail):
            return [{"field": path or None, "message": str(item)} for item in detail]
        out = []
        for index, item in enumerate(detail):
            if isinstance(item, Mapping | list | tuple):
                out += flatten_errors(item, f"{path}[{index}]")
            else:
                out.append({"field": path or None, "message": str(item)})
        return out
    return [{"field": path or None, "message": str(detail)}]


def exception_handler(exc, context):
    response = drf_exception_handler(exc, context)
    if response is not None:
        if isinstance(exc, ValidationError) or response.status_code == status.HTTP_400_BAD_REQUEST:
            errors = flatten_errors(exc.detail)
            response.data = error_body(summary(errors), errors)
        else:
            response.data = error_body(_one_line(response.data))
        return response  # DRF's headers (WWW-Authenticate, Retry-After, Allow) stay
    if isinstance(exc, DjangoValidationError):
        errors = flatten_errors(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
        return invalid_response(errors)
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE / 2**20
        return Response(error_body(f"the request body is larger than {limit:g} MB: send a file as "
                                   "multipart/form-data (the file field), which has no such limit"),
                        status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, IntegrityError):
        return Response(error_body(f"conflicts with existing data: {exc}"), status=status.HTTP_409_CONFLICT)
    if isinstance(exc, DataError):  # a value the database cannot hold (a NUL character in a query parameter)
        return invalid_response([{"field": None, "message": f"a value the database cannot store: {exc}"}])
    error_id = uuid.uuid4().hex[:12]
    logger.exception("unhandled API error %s", error_id)
    return Response(error_body(f"internal error (reference {error_id}); see the server log"),
                    status=status.HTTP_500_INTERNAL_SERVER_ERROR)


def not_found(request, exception):
    """handler404: a URL below /api/ that no route takes (/api/deployments/x/history/) answers in the Error
    shape too; pages keep Django's."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("Not found."), status=status.HTTP_404_NOT_FOUND)
    return defaults.page_not_found(request, exception)


def _one_line(data) -> str:
    if isinstance(data, Mapping) and isinstance(data.get("detail"), str):
        return data["detail"]
    return summary(flatten_errors(data))


ERROR_STATUSES = {  # status -> (when it applies, description)
    "400": ("always", "the request is malformed or a value is invalid: `errors` names each field"),
    "401": ("authenticated", "no credentials, or a token that is unknown or expired"),
    "403": ("authenticated", "the caller's role does not allow this"),
    "404": ("path parameter", "no such object"),
    "409": ("writes", "conflicts with the object's state or with existing data"),
    "413": ("body", "the body is larger than the server takes (DATA_UPLOAD_MAX_MEMORY_SIZE); a file goes as "
                    "multipart/form-data where the operation takes one"),
    "415": ("body", "the body's Content-Type is not one this operation reads"),
    "500": ("always", "an unexpected error; `detail` quotes a reference to look up in the server log"),
}
_WRITES = {"post", "put", "patch", "delete"}
_BODY = {"post", "put", "patch"}


def add_error_responses(result, generator, request, public):
    """drf-spectacular postprocessing hook: the Error component, and every operation's error answers documented
    with it (an answer a view documents without a body gets it; one with its own body keeps that)."""
    from drf_spectacular.openapi import AutoSchema
    from drf_spectacular.plumbing import ComponentRegistry
    from rest_framework.views import APIView

    registry, inspector, view = ComponentRegistry(), AutoSchema(), APIView()
    view.request = None
    inspector.registry, inspector.view, inspector.method, inspector.path = registry, view, "GET", "/api/"
    ref = inspector.resolve_serializer(ErrorSerializer, "response").ref
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in registry.build({}).get("schemas", {}).items():
        schemas.setdefault(name, schema)
    content = {"application/json": {"schema": ref}}
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            for code, (when, description) in ERROR_STATUSES.items():
                applies = (when == "always" or (when == "authenticated" and operation.get("security"))
                           or (when == "path parameter" and "{" in path) or (when == "writes" and method in _WRITES)
                           or (when == "body" and method in _BODY))
                if applies:
                    responses.setdefault(code, {"description": description})
            for code, response in responses.items():
                if code[0] in "45" and "content" not in response:
                    response["content"] = content
    return result
