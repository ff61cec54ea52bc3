"""The mapping of the app's domain errors and Django's database errors to the API's errors
(``api_exception``); ``ApiError`` for the statuses DRF has no class for (412, 422, 413, 503)."""

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

# NOTE: a fixed text: the driver's message would tell the caller the database's address.
UNAVAILABLE = "The memory database is unavailable; try again later."
TOO_LARGE = "The request body is larger than this server accepts."


class ApiError(exceptions.APIException):
    """An API error of a status DRF has no exception class for."""

    # NOTE: DRF's handler sends it as Retry-After.
    wait: int | None = None

    def __init__(
        self, status_code: int, detail: str, code: str, *, wait: int | None = None
    ) -> None:
        super().__init__(detail, code)
        self.status_code = status_code
        self.wait = wait


def _unavailable(detail: str) -> ApiError:
    # NOTE: Retry-After 1: a database failing over is back in seconds.
    return ApiError(status.HTTP_503_SERVICE_UNAVAILABLE, detail, "service_unavailable", wait=1)


def api_exception(exc: Exception) -> Exception:
    """The DRF exception an app or Django error stands for; any other error as it is."""
    if isinstance(exc, FactVersionConflict):
        return ApiError(status.HTTP_412_PRECONDITION_FAILED, str(exc), "precondition_failed")
    if isinstance(exc, IdempotencyKeyReused):
        return ApiError(status.HTTP_422_UNPROCESSABLE_ENTITY, str(exc), "idempotency_key_reused")
    if isinstance(exc, FactNotFound):
        return exceptions.NotFound(str(exc))
    if isinstance(exc, (SearchTimeout, SearchUnavailable)):
        return _unavailable(str(exc))
    if isinstance(exc, ReadsInFlight):
        return exceptions.Throttled(wait=exc.retry_after, detail=str(exc))
    if isinstance(exc, (OperationalError, InterfaceError)):
        # NOTE: one that no service's guard met (a ``MemoryUnavailable`` was logged there).
        unavailable_log(exc)
        return _unavailable(UNAVAILABLE)
    if isinstance(exc, MemoryUnavailable):
        return _unavailable(UNAVAILABLE)
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(as_serializer_error(exc))
    if isinstance(exc, RequestDataTooBig):
        return ApiError(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, TOO_LARGE, "payload_too_large")
    return exc
