"""What every view of the app shares: the base ``MemoryView``, the JSON parser and renderer,
the mapping of domain and database errors to statuses (412, 404, 413, 422, 503), the schema's
parameters and the JSON 404 of unknown paths."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import orjson
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, JsonResponse
from django.utils.cache import patch_cache_control
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import exceptions, parsers, renderers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer, as_serializer_error
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from memory import counters, limits
from memory.exceptions import (
    FactNotFound,
    FactVersionConflict,
    IdempotencyKeyReused,
    MemoryUnavailable,
    ReadsInFlight,
    SearchTimeout,
    SearchUnavailable,
)
from memory.permissions import CanReachOwner, owner_id_for
from memory.serializers import (
    ErrorSerializer,
)
from memory.validators import FACT_KEY_RE, OWNER_ID_RE, actor_of, validate_idempotency_key

IF_MATCH_RE = re.compile(r'\s*(?:([0-9]{1,18})|"([0-9]{1,18})")\s*')


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
    if isinstance(exc, (MemoryUnavailable, OperationalError, InterfaceError)):
        return ServiceUnavailable()
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(as_serializer_error(exc))
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge()
    return exc


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser; a body nested too deep for Python's parser is a 400 as well."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as e:
            raise exceptions.ParseError("JSON parse error - nested too deep.") from e


def _drf_only(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is DRF's to write")


# NOTE: what orjson does not write as DRF's encoder does goes to ``default``, which hands it
# back to DRF: a datetime (DRF cuts microseconds to milliseconds and writes "Z"), a dataclass,
# and subclasses of str, int, dict and list (DRF's ErrorDetail, lazy strings).
_ORJSON_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


class JSONRenderer(renderers.JSONRenderer):
    """DRF's JSON renderer, written by orjson where that writes the same JSON: compact, UTF-8,
    U+2028 and U+2029 escaped as DRF escapes them. Anything else (an ``indent`` asked for,
    DRF's ASCII or spaced settings, a value orjson would write otherwise, an integer past 64
    bits) is rendered by DRF itself.

    NOTE: a turn page or a long context is megabytes of JSON: DRF's encoder took about 35 ms
    for 6 MB, holding the interpreter's lock against every other request of the process
    (``health/`` included), orjson takes 5-8 ms (issue 23, finding 3). A float may be written
    in another exponent form (``1e16`` for ``1e+16``), the same JSON number.
    """

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Any = None,
    ) -> bytes:
        if data is None:
            return b""
        indent = self.get_indent(accepted_media_type, renderer_context or {})
        if self.ensure_ascii or not self.compact or indent is not None:
            return super().render(data, accepted_media_type, renderer_context)  # type: ignore[no-any-return]
        try:
            body = orjson.dumps(data, default=_drf_only, option=_ORJSON_OPTIONS)
        except TypeError:
            return super().render(data, accepted_media_type, renderer_context)  # type: ignore[no-any-return]
        # NOTE: their lead byte first, which memchr finds: for 6 MB with none of it that is 0.06
        # ms, where the two searches alone take 7 ms with the interpreter's lock held (issue 23).
        if b"\xe2" in body and (b"\xe2\x80\xa8" in body or b"\xe2\x80\xa9" in body):
            body = body.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
        return body


def _validated(serializer_class: type[Serializer], data: Any) -> dict[str, Any]:
    # NOTE: callers pass a query as a plain dict, not a QueryDict, so that DRF does not take an
    # empty value ("?limit=") as an absent one, the way it reads HTML forms: it is a 400.
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data  # type: ignore[no-any-return]


def _idempotency_key(request: Request) -> str | None:
    value = request.headers.get("Idempotency-Key")
    if value is not None:
        try:
            validate_idempotency_key(value)
        except DjangoValidationError as e:
            raise exceptions.ValidationError({"Idempotency-Key": e.messages}) from e
    return value


def _next_url(request: Request, cursor: str | None) -> str | None:
    """The absolute URL of the next page: this one with ``cursor`` replaced; none at the end."""
    if cursor is None:
        return None
    return replace_query_param(request.build_absolute_uri(), "cursor", cursor)  # type: ignore[no-any-return]


def request_actor(request: Request) -> str:
    """The actor a fact version of this request records: ``api:<username>``."""
    return actor_of("api", request.user.get_username())


def _if_match(request: Request) -> int | None:
    value = request.headers.get("If-Match")
    if value is None:
        return None
    match = IF_MATCH_RE.fullmatch(value)
    if match is None:
        raise exceptions.ValidationError(
            {"If-Match": ['Send the version the fact is expected at: 3 or "3".']}
        )
    return int(match.group(1) or match.group(2))


# Schema ------------------------------------------------------------------------------------


def _path_parameter(name: str, pattern: re.Pattern[str], description: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        OpenApiTypes.STR,
        OpenApiParameter.PATH,
        pattern=pattern.pattern,
        description=description,
    )


USER_ID = _path_parameter(
    "user_id", OWNER_ID_RE, "The memory owner's external id: 1-128 letters, digits and _ - . @ :"
)
FACT_KEY = _path_parameter(
    "key", FACT_KEY_RE, "A fact key: 1-64 lower-case letters, digits and _ - ., not only dots."
)
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    pattern=r"^[\x20-\x7e]{1,128}$",
    description="1-128 printable ASCII characters. A retry with the same key and body for the "
    "same owner stores nothing new and answers with the turn first stored; the same key with "
    "a different body is a 422 and stores nothing.",
)
IF_MATCH = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    pattern=r'^([0-9]{1,18}|"[0-9]{1,18}")$',
    description='The version the fact must be at (3 or "3"); otherwise 412 and nothing changes.',
)

ERRORS: dict[int, OpenApiResponse] = {
    400: OpenApiResponse(
        OpenApiTypes.OBJECT,
        description='Invalid input, as {"field": ["message"]}; also a query parameter given twice.',
    ),
    401: OpenApiResponse(ErrorSerializer, description="Not authenticated."),
    403: OpenApiResponse(
        ErrorSerializer, description="Not authenticated (session authentication) or not allowed."
    ),
    404: OpenApiResponse(
        ErrorSerializer, description="Not found, or another user's memory (never revealed)."
    ),
    412: OpenApiResponse(ErrorSerializer, description="If-Match names a stale version."),
    422: OpenApiResponse(
        ErrorSerializer,
        description="The Idempotency-Key was already used with a different body; nothing stored.",
    ),
    413: OpenApiResponse(ErrorSerializer, description="The body is over the configured size."),
    415: OpenApiResponse(ErrorSerializer, description="The body is not JSON."),
    429: OpenApiResponse(
        ErrorSerializer,
        description="Throttled: too many requests, or (search, export, long contexts and turn "
        "pages) "
        'too many heavy reads in flight (MEMORY["HEAVY_READS_PER_CALLER"]); see Retry-After.',
    ),
    503: OpenApiResponse(ErrorSerializer, description="The database is unreachable."),
}
READ_ERRORS = (400, 401, 403, 404, 429, 503)
WRITE_ERRORS = (400, 401, 403, 404, 413, 415, 429, 503)
MAX_FACTS_400 = (
    'Invalid input, as {"field": ["message"]}; also a query parameter given twice, or a new key '
    'past MEMORY["MAX_FACTS"].'
)


def schema_responses(
    success: dict[int, Any], errors: tuple[int, ...], bad_input: str | None = None
) -> dict[int, Any]:
    # NOTE: a serializer alone would leave its response's description empty; its docstring says it.
    responses: dict[int, Any] = {
        code: response
        if isinstance(response, OpenApiResponse)
        else OpenApiResponse(response, description=(response.__doc__ or "").strip())
        for code, response in success.items()
    }
    responses.update({code: ERRORS[code] for code in sorted(errors)})
    if bad_input is not None:
        responses[400] = OpenApiResponse(OpenApiTypes.OBJECT, description=bad_input)
    return responses


def _fact_link(operation_id: str, description: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "parameters": {"user_id": "$request.path.user_id", "key": "$request.path.key"},
        "description": description,
    }


# NOTE: OpenAPI links from a fact's writes to its history, which say what the history does
# after a delete: it stays (a 200), so a client (or a schema-driven tester) expects no 404.
LINKS: dict[str, dict[str, dict[str, Any]]] = {
    "fact_put": {
        "FactHistory": _fact_link("fact_history", "Every version of the fact, this one first.")
    },
    "fact_delete": {
        "FactHistory": _fact_link(
            "fact_history",
            "The history outlives the fact: a 200 whose newest version has deleted: true.",
        ),
        "FactPut": _fact_link("fact_put", "Setting the key again continues its version count."),
    },
}


class MemorySchema(AutoSchema):
    """drf-spectacular's schema, plus the OpenAPI links of ``LINKS`` on success responses."""

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is not None:
            for code, response in operation["responses"].items():
                if code.startswith("2") and operation["operationId"] in LINKS:
                    response["links"] = LINKS[operation["operationId"]]
        return operation  # type: ignore[no-any-return]


# Views -------------------------------------------------------------------------------------


class MemoryView(APIView):
    """Base of the app's views: JSON bodies, the owner check, and the app's error mapping."""

    permission_classes = [CanReachOwner]
    parser_classes = [JSONParser]
    schema = MemorySchema()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # NOTE: every query parameter of the API is single-valued: "?turns=1&turns=x" would
        # otherwise be read as its last value and the first one ignored. After the owner check,
        # so that it tells a stranger nothing.
        repeated = sorted({k for k, v in request.query_params.lists() if len(v) > 1})
        if repeated:
            raise exceptions.ValidationError({k: ["Give this parameter once."] for k in repeated})

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        with ExitStack() as self._slots:
            self._heavy = False
            response = super().dispatch(request, *args, **kwargs)
            if self._heavy:
                # NOTE: rendered while the slot is held: the JSON of a long page or context is
                # much of its work (Django renders again only what is not rendered yet).
                response.render()
        match = request.resolver_match
        counters.request_observed(
            view=match.view_name if match is not None else type(self).__name__,
            method=request.method or "",
            status=response.status_code,
            seconds=time.perf_counter() - started,
        )
        return response

    def heavy_read(self, request: Request, user_id: str) -> None:
        """Hold one of the caller's heavy-read slots (``memory.limits``) until this response is
        rendered; raises ``ReadsInFlight`` (a 429) when they are all held. The caller is the
        user, or for a service caller reaching another's memory, that owner: a chat backend
        calling for all its end users gets slots per end user."""
        self._slots.enter_context(self.heavy_slot(request, user_id))
        self._heavy = True

    def heavy_slot(self, request: Request, user_id: str) -> ExitStack:
        """One of the caller's heavy-read slots (as ``heavy_read``), held until the stack
        returned is closed: a streamed response holds it until its stream ends."""
        user = request.user
        own = owner_id_for(user) == user_id
        caller = f"user:{user.pk}" if own else f"owner:{user_id}"
        slot = ExitStack()
        slot.enter_context(limits.heavy_read(caller=caller))
        return slot

    def get_renderers(self) -> list[renderers.BaseRenderer]:
        # NOTE: the site's renderers (DRF's defaults, or its DEFAULT_RENDERER_CLASSES), read
        # per request, with DRF's JSON renderer replaced by this module's (the same JSON).
        return [
            JSONRenderer() if renderer is renderers.JSONRenderer else renderer()
            for renderer in self.renderer_classes
        ]

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Response | None]:
        handler = super().get_exception_handler()

        def memory_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
            return handler(api_exception(exc), context)  # type: ignore[no-any-return]

        return memory_exception_handler

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        # NOTE: a user's memory is personal: no shared or browser cache may keep a copy.
        patch_cache_control(response, no_store=True, private=True)
        return response  # type: ignore[no-any-return]


@csrf_exempt
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any other path under the API, such as a malformed user id or fact key: a JSON 404."""
    return JsonResponse(
        {"detail": "Not found."}, status=404, json_dumps_params={"separators": (",", ":")}
    )
