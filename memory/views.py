"""The HTTP API: one thin ``APIView`` per URL over the services and selectors, and the app's
mapping of domain and database errors to statuses (412, 404, 413, 422, 503), in one place.

Selectors already return the contract's dicts, so views hand them to ``Response`` as they are;
the output serializers only describe them in the OpenAPI schema.
"""

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
from django.http import Http404, HttpRequest, JsonResponse
from django.utils.cache import patch_cache_control
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, parsers, renderers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer, as_serializer_error
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from memory import counters, limits, selectors, services
from memory.conf import conf
from memory.exceptions import (
    FactNotFound,
    FactVersionConflict,
    IdempotencyKeyReused,
    MemoryUnavailable,
    ReadsInFlight,
    SearchTimeout,
)
from memory.payloads import fact_payload, turn_payload
from memory.permissions import CanReachOwner, can_reach, owner_id_for
from memory.serializers import (
    ContextMessagesQuerySerializer,
    ContextMessagesSerializer,
    ContextQuerySerializer,
    ContextSerializer,
    ErrorSerializer,
    FactHistorySerializer,
    FactListSerializer,
    FactPutInputSerializer,
    FactSerializer,
    FactsMergeInputSerializer,
    HealthSerializer,
    LinkInputSerializer,
    LinkResultSerializer,
    PageQuerySerializer,
    SearchQuerySerializer,
    SessionListSerializer,
    TurnInputSerializer,
    TurnListQuerySerializer,
    TurnPageSerializer,
    TurnSearchSerializer,
    TurnSerializer,
    turn_input_accepted,
)
from memory.validators import FACT_KEY_RE, OWNER_ID_RE, validate_idempotency_key

# `If-Match: 3` or `If-Match: "3"` (a strong entity tag holding the version).
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


def api_exception(exc: Exception) -> Exception:
    """The DRF exception an app or Django error stands for; any other error as it is."""
    if isinstance(exc, FactVersionConflict):
        return PreconditionFailed(str(exc))
    if isinstance(exc, IdempotencyKeyReused):
        return UnprocessableEntity(str(exc))
    if isinstance(exc, FactNotFound):
        return exceptions.NotFound(str(exc))
    if isinstance(exc, SearchTimeout):
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

USER_ID = OpenApiParameter(
    "user_id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=OWNER_ID_RE.pattern,
    description="The memory owner's external id: 1-128 letters, digits and _ - . @ :",
)
FACT_KEY = OpenApiParameter(
    "key",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=FACT_KEY_RE.pattern,
    description="A fact key: 1-64 lower-case letters, digits and _ - ., not only dots.",
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
        description="Throttled: too many requests, or (search, long contexts and turn pages) "
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


def _responses(
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
        user = request.user
        own = owner_id_for(user) == user_id
        caller = f"user:{user.pk}" if own else f"owner:{user_id}"
        self._slots.enter_context(limits.heavy_read(caller=caller))
        self._heavy = True

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


class TurnsView(MemoryView):
    """``users/{user_id}/turns/``: append a turn; list turns, oldest first."""

    @extend_schema(
        tags=["turns"],
        parameters=[USER_ID, IDEMPOTENCY_KEY],
        request=TurnInputSerializer,
        responses=_responses(
            {
                201: OpenApiResponse(
                    TurnSerializer, description="The turn, or on a retry the turn first stored."
                )
            },
            (*WRITE_ERRORS, 422),
        ),
        summary="Append a turn",
        operation_id="turn_append",
    )
    def post(self, request: Request, user_id: str) -> Response:
        idempotency_key = _idempotency_key(request)
        data = turn_input_accepted(request.data)
        if data is None:
            data = _validated(TurnInputSerializer, request.data)
        turn = services.turn_append(owner_id=user_id, idempotency_key=idempotency_key, **data)
        # NOTE: a retry answers exactly as the first try did: 201 and the turn first stored.
        return Response(turn_payload(turn), status=status.HTTP_201_CREATED)

    @extend_schema(
        tags=["turns"],
        parameters=[USER_ID, TurnListQuerySerializer],
        responses=_responses({200: TurnPageSerializer}, READ_ERRORS),
        summary="List turns, oldest first",
        operation_id="turn_list",
    )
    def get(self, request: Request, user_id: str) -> Response:
        query = _validated(TurnListQuerySerializer, request.query_params.dict())
        if limits.page_heavy(limit=query["limit"]):
            self.heavy_read(request, user_id)
        turns, more = selectors.turn_list(owner_id=user_id, max_bytes=conf.MAX_PAGE_BYTES, **query)
        next_url = None
        if more:
            next_url = replace_query_param(request.build_absolute_uri(), "after", turns[-1]["seq"])
        return Response({"results": turns, "next": next_url})


class ContextView(MemoryView):
    """``users/{user_id}/context/``: the facts and last turns, for the next model call."""

    @extend_schema(
        tags=["context"],
        parameters=[USER_ID, ContextQuerySerializer],
        responses=_responses({200: ContextSerializer}, READ_ERRORS),
        summary="The context for the next reply",
        operation_id="context_get",
    )
    def get(self, request: Request, user_id: str) -> Response:
        turns = None
        if request.query_params:
            turns = _validated(ContextQuerySerializer, request.query_params.dict()).get("turns")
        if limits.context_heavy(turns=turns):
            self.heavy_read(request, user_id)
        return Response(selectors.context_get(owner_id=user_id, turns=turns))


class ContextMessagesView(MemoryView):
    """``users/{user_id}/context/messages/``: the context as an LLM chat API's messages."""

    @extend_schema(
        tags=["context"],
        parameters=[USER_ID, ContextMessagesQuerySerializer],
        responses=_responses({200: ContextMessagesSerializer}, READ_ERRORS),
        summary="The context as model messages, within a token budget",
        operation_id="context_messages",
    )
    def get(self, request: Request, user_id: str) -> Response:
        query = _validated(ContextMessagesQuerySerializer, request.query_params.dict())
        if limits.context_heavy(turns=query.get("turns"), max_tokens=query.get("max_tokens")):
            self.heavy_read(request, user_id)
        return Response(selectors.context_messages(owner_id=user_id, **query))


class FactsView(MemoryView):
    """``users/{user_id}/facts/``: every fact; merge several at once."""

    @extend_schema(
        tags=["facts"],
        parameters=[USER_ID],
        responses=_responses({200: FactListSerializer}, READ_ERRORS),
        summary="List facts, by key",
        operation_id="fact_list",
    )
    def get(self, request: Request, user_id: str) -> Response:
        return Response({"facts": selectors.fact_list(owner_id=user_id)})

    @extend_schema(
        tags=["facts"],
        parameters=[USER_ID],
        request=FactsMergeInputSerializer,
        responses=_responses(
            {200: FactListSerializer}, WRITE_ERRORS, bad_input=MAX_FACTS_400 + " Nothing is set."
        ),
        summary="Set several facts; answer with all facts",
        operation_id="facts_merge",
    )
    def patch(self, request: Request, user_id: str) -> Response:
        data = _validated(FactsMergeInputSerializer, request.data)
        facts = services.facts_merge(owner_id=user_id, **data)
        return Response({"facts": [fact_payload(fact) for fact in facts]})


class FactView(MemoryView):
    """``users/{user_id}/facts/{key}/``: set or delete one fact, optionally with If-Match."""

    @extend_schema(
        tags=["facts"],
        parameters=[USER_ID, FACT_KEY, IF_MATCH],
        request=FactPutInputSerializer,
        responses=_responses(
            {
                200: OpenApiResponse(FactSerializer, description="The fact, changed or as it was."),
                201: OpenApiResponse(FactSerializer, description="The fact, created."),
            },
            (*WRITE_ERRORS, 412),
            bad_input=MAX_FACTS_400,
        ),
        summary="Set one fact (201 when created)",
        operation_id="fact_put",
    )
    def put(self, request: Request, user_id: str, key: str) -> Response:
        expected_version = _if_match(request)
        data = _validated(FactPutInputSerializer, request.data)
        fact, created = services.fact_put(
            owner_id=user_id, key=key, expected_version=expected_version, **data
        )
        return Response(fact_payload(fact), status=201 if created else 200)

    @extend_schema(
        tags=["facts"],
        parameters=[USER_ID, FACT_KEY, IF_MATCH],
        responses=_responses(
            {204: OpenApiResponse(description="Deleted; its history keeps a deleted version.")},
            (*READ_ERRORS, 412),
        ),
        summary="Delete one fact (404 if there is none)",
        operation_id="fact_delete",
    )
    def delete(self, request: Request, user_id: str, key: str) -> Response:
        expected_version = _if_match(request)
        services.fact_delete(owner_id=user_id, key=key, expected_version=expected_version)
        return Response(status=status.HTTP_204_NO_CONTENT)


class FactHistoryView(MemoryView):
    """``users/{user_id}/facts/{key}/history/``: the versions of one fact, newest first, paged."""

    @extend_schema(
        tags=["facts"],
        parameters=[USER_ID, FACT_KEY, PageQuerySerializer],
        responses=_responses({200: FactHistorySerializer}, READ_ERRORS),
        summary="Versions of one fact, newest first (404 if the key never existed)",
        operation_id="fact_history",
    )
    def get(self, request: Request, user_id: str, key: str) -> Response:
        query = _validated(PageQuerySerializer, request.query_params.dict())
        versions, cursor = selectors.fact_history(owner_id=user_id, key=key, **query)
        if not versions and "cursor" not in query:
            # NOTE: every key ever set has at least one version, so an empty history means
            # no such fact (or a forgotten owner): a 404, like a DELETE of it.
            raise FactNotFound(key)
        return Response({"results": versions, "next": _next_url(request, cursor)})


class SessionsView(MemoryView):
    """``users/{user_id}/sessions/``: the session labels of the owner's turns, paged."""

    @extend_schema(
        tags=["sessions"],
        parameters=[USER_ID, PageQuerySerializer],
        responses=_responses({200: SessionListSerializer}, READ_ERRORS),
        summary="List sessions, most recently seen first",
        operation_id="session_list",
    )
    def get(self, request: Request, user_id: str) -> Response:
        query = _validated(PageQuerySerializer, request.query_params.dict())
        sessions, cursor = selectors.session_list(owner_id=user_id, **query)
        return Response({"results": sessions, "next": _next_url(request, cursor)})


class UserView(MemoryView):
    """``users/{user_id}/``: forget the owner."""

    @extend_schema(
        tags=["users"],
        parameters=[USER_ID],
        responses=_responses({204: None}, READ_ERRORS),
        summary="Forget the user: every turn, fact, version and session",
        operation_id="memory_forget",
    )
    def delete(self, request: Request, user_id: str) -> Response:
        services.memory_forget(owner_id=user_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class HealthView(MemoryView):
    """``health/``: whether the database and the cache answer; open to load-balancer probes."""

    # NOTE: no authentication (a bad token must not fail a probe), no throttle (probes are
    # frequent), and nothing in the answer but two words.
    authentication_classes = ()
    permission_classes = (AllowAny,)
    throttle_classes = ()

    @extend_schema(
        tags=["health"],
        responses={
            200: OpenApiResponse(HealthSerializer, description="The database answers."),
            400: OpenApiResponse(
                OpenApiTypes.OBJECT, description="A query parameter given more than once."
            ),
            503: OpenApiResponse(HealthSerializer, description="The database is down."),
        },
        summary="Health of the database and the cache",
        operation_id="health_get",
    )
    def get(self, request: Request) -> Response:
        health = selectors.health_get()
        ok = health["database"] == "ok"
        return Response(health, status=200 if ok else status.HTTP_503_SERVICE_UNAVAILABLE)


class SearchView(MemoryView):
    """``users/{user_id}/search/?q=``: the owner's turns that match a text, best match first."""

    @extend_schema(
        tags=["turns"],
        parameters=[USER_ID, SearchQuerySerializer],
        responses=_responses({200: TurnSearchSerializer}, READ_ERRORS),
        summary="Search turns by content, best match first",
        operation_id="turn_search",
    )
    def get(self, request: Request, user_id: str) -> Response:
        query = _validated(SearchQuerySerializer, request.query_params.dict())
        self.heavy_read(request, user_id)
        return Response({"results": selectors.turn_search(owner_id=user_id, **query)})


class LinkView(MemoryView):
    """``users/{user_id}/link/``: move an anonymous owner's memory to the user, forget it."""

    @extend_schema(
        tags=["users"],
        parameters=[USER_ID],
        request=LinkInputSerializer,
        responses=_responses(
            {200: LinkResultSerializer},
            WRITE_ERRORS,
            bad_input='Invalid input, as {"field": ["message"]}; also a query parameter given '
            "twice, or a user linked to itself.",
        ),
        summary="Link an anonymous user to this one (idempotent)",
        operation_id="memory_link",
    )
    def post(self, request: Request, user_id: str) -> Response:
        from_user_id = _validated(LinkInputSerializer, request.data)["from_user_id"]
        if not can_reach(request.user, from_user_id):
            # NOTE: as for the URL's owner (CanReachOwner): 404, and nothing of either changes.
            raise Http404
        result = services.memory_link(owner_id=user_id, from_owner_id=from_user_id)
        return Response(result._asdict())


@csrf_exempt
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any other path under the API, such as a malformed user id or fact key: a JSON 404."""
    return JsonResponse(
        {"detail": "Not found."}, status=404, json_dumps_params={"separators": (",", ":")}
    )
