"""The API's pagination: limit/offset with a ceiling, so ?limit=100000 cannot make one response of a table."""

from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    max_limit = 500
