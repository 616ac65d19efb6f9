"""The API's query parameters: limit/offset with a ceiling (so ?limit=100000 cannot make one response of a
table) that refuses what is not a number, and a filter backend that refuses parameters nobody reads, so a typo
(`?clustr=1`) is a 400 naming it instead of an unfiltered list."""

from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError
from rest_framework.filters import BaseFilterBackend, OrderingFilter, SearchFilter
from rest_framework.pagination import LimitOffsetPagination


def _whole_number(request, name: str, minimum: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not raw.isdecimal() or int(raw) < minimum:
        raise ValidationError({name: [f"expected a whole number of at least {minimum}, got {raw!r}"]})
    return int(raw)


class Pagination(LimitOffsetPagination):
    max_limit = 500

    def get_limit(self, request):
        limit = _whole_number(request, self.limit_query_param, 1)
        if limit is None:
            return self.default_limit
        return min(limit, self.max_limit) if self.max_limit else limit

    def get_offset(self, request):
        offset = _whole_number(request, self.offset_query_param, 0)
        return offset or 0


class Search(SearchFilter):
    """?search= (any case, part of a word) on views that name search_fields; elsewhere neither read nor documented."""

    def get_schema_operation_parameters(self, view):
        return super().get_schema_operation_parameters(view) if getattr(view, "search_fields", None) else []


class KnownQueryParams(BaseFilterBackend):
    """Runs first in DEFAULT_FILTER_BACKENDS: every query parameter must be one the view reads. Known are `format`,
    the paginator's, the filterset's fields, `ordering`/`search` where those backends apply, and what a view
    names in `query_params` (every action) or `action_query_params` ({action: names})."""

    def filter_queryset(self, request, queryset, view):
        known = known_query_params(request, queryset, view)
        unknown = sorted(set(request.query_params) - known)
        if unknown:
            listed = ", ".join(sorted(known))
            raise ValidationError({name: [f"unknown query parameter; known here: {listed}"] for name in unknown})
        return queryset


def known_query_params(request, queryset, view) -> set[str]:
    known = {"format"}
    paginator = getattr(view, "paginator", None)
    if paginator is not None:
        known.update(p for p in (getattr(paginator, "limit_query_param", None),
                                 getattr(paginator, "offset_query_param", None),
                                 getattr(paginator, "page_query_param", None)) if p)
    for backend_class in getattr(view, "filter_backends", ()):
        if issubclass(backend_class, DjangoFilterBackend):
            filterset_class = backend_class().get_filterset_class(view, queryset)
            if filterset_class is not None:
                known.update(_filterset_params(filterset_class))
        elif issubclass(backend_class, OrderingFilter):
            known.add(backend_class.ordering_param)
        elif issubclass(backend_class, SearchFilter) and getattr(view, "search_fields", None):
            known.add(backend_class.search_param)
    known.update(getattr(view, "query_params", ()))
    known.update(getattr(view, "action_query_params", {}).get(getattr(view, "action", None), ()))
    return known


def _filterset_params(filterset_class) -> set[str]:
    """The names a filterset reads: each filter's, or for a range-like filter each of its widget's suffixed names."""
    names = set()
    for name, filter_ in filterset_class.base_filters.items():
        widget = filter_.field_class.widget if hasattr(filter_.field_class, "widget") else None
        suffixes = getattr(filter_.extra.get("widget") or widget, "suffixes", None)
        if suffixes:
            names.update(f"{name}_{suffix}" if suffix else name for suffix in suffixes)
        else:
            names.add(name)
    return names
