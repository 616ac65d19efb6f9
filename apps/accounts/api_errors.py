"""API errors are JSON naming the field; anything unexpected becomes a 500 with an id, never a traceback."""

import logging
import uuid

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

logger = logging.getLogger(__name__)


def exception_handler(exc, context):
    response = drf_exception_handler(exc, context)
    if response is not None:
        return response
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        return Response(detail, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, IntegrityError):
        return Response({"detail": f"conflicts with existing data: {exc}"}, status=status.HTTP_409_CONFLICT)
    error_id = uuid.uuid4().hex[:12]
    logger.exception("unhandled API error %s", error_id)
    return Response({"detail": f"internal error (reference {error_id}); see the server log"},
                    status=status.HTTP_500_INTERNAL_SERVER_ERROR)
