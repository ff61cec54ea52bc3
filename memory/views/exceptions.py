"""The HTTP errors of the API that DRF lacks (412, 422, 413, 503), and the mapping of the app's
domain errors and Django's database errors to them (``api_exception``)."""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError
from rest_framework import exceptions, status
from rest_framework.serializers import as_serializer_error

from memory.exceptions import (
    FactNotFound,
    FactVersionConflict,
    IdempotencyKeyReused,
    MemoryUnavailable,
    ReadsInFlight,
    SearchTimeout,
    SearchUnavailable,
    unavailable_log,
)


class PreconditionFailed(exceptions.APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = "The fact is not at the version given in If-Match."
    default_code = "precondition_failed"


class UnprocessableEntity(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = "The Idempotency-Key was already used for a different request."
    default_code = "idempotency_key_reused"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is larger than this server accepts."
    default_code = "payload_too_large"


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    # NOTE: a fixed text: the driver's message would tell the caller the database's address.
    default_detail = "The memory database is unavailable; try again later."
    default_code = "service_unavailable"
    # NOTE: DRF's handler sends it as Retry-After: a database failing over is back in seconds.
    wait = 1


def api_exception(exc: Exception) -> Exception:
    """The DRF exception an app or Django error stands for; any other error as it is."""
    if isinstance(exc, FactVersionConflict):
        return PreconditionFailed(str(exc))
    if isinstance(exc, IdempotencyKeyReused):
        return UnprocessableEntity(str(exc))
    if isinstance(exc, FactNotFound):
        return exceptions.NotFound(str(exc))
    if isinstance(exc, (SearchTimeout, SearchUnavailable)):
        return ServiceUnavailable(str(exc))
    if isinstance(exc, ReadsInFlight):
        return exceptions.Throttled(wait=exc.retry_after, detail=str(exc))
    if isinstance(exc, (OperationalError, InterfaceError)):
        # NOTE: one that no service's guard met (a ``MemoryUnavailable`` was logged there).
        unavailable_log(exc)
        return ServiceUnavailable()
    if isinstance(exc, MemoryUnavailable):
        return ServiceUnavailable()
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(as_serializer_error(exc))
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge()
    return exc
