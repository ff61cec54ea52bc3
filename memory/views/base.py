"""The base view of the API (``MemoryView``: JSON bodies, the owner check, the error mapping,
the heavy-read slots), the request helpers its views share and the JSON 404 of unknown paths.

The error mapping, the parser, the renderer and the schema's parts live in ``exceptions``,
``parsers``, ``renderers`` and ``schema`` beside it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, JsonResponse
from django.http.request import HttpHeaders
from django.utils.cache import patch_cache_control
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, negotiation, renderers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from memory import counters, limits
from memory.permissions import CanReachOwner, owner_id_for
from memory.validators import actor_of, validate_idempotency_key
from memory.views.exceptions import (
    api_exception,
)
from memory.views.parsers import JSONParser
from memory.views.renderers import JSONRenderer
from memory.views.schema import MemorySchema

__all__ = ["IF_MATCH_RE", "MemoryView", "not_found", "request_actor", "request_header"]

# What patch_cache_control(no_store=True, private=True) writes on a response without the header.
_NOT_STORED = "no-store, private"
IF_MATCH_RE = re.compile(r'\s*(?:([0-9]{1,18})|"([0-9]{1,18})")\s*')


def _validated(serializer_class: type[Serializer[Any]], data: Any) -> dict[str, Any]:
    # NOTE: callers pass a query as a plain dict, not a QueryDict, so that DRF does not take an
    # empty value ("?limit=") as an absent one, the way it reads HTML forms: it is a 400.
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data  # type: ignore[no-any-return]


def request_header(request: HttpRequest | Request, name: str) -> Any:
    """``request.headers.get(name)`` read from ``META``, which ``headers`` is made of: Django builds
    ``headers`` from every key of ``META`` on first use (about 15 us, on a POST's path)."""
    return request.META.get(HttpHeaders.to_wsgi_name(name))


def _idempotency_key(request: Request) -> str | None:
    value: str | None = request_header(request, "Idempotency-Key")
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
    return replace_query_param(request.build_absolute_uri(), "cursor", cursor)


def request_actor(request: Request) -> str:
    """The actor a fact version of this request records: ``api:<username>``."""
    return actor_of("api", request.user.get_username())


def _if_match(request: Request) -> int | None:
    value = request_header(request, "If-Match")
    if value is None:
        return None
    match = IF_MATCH_RE.fullmatch(value)
    if match is None:
        raise exceptions.ValidationError(
            {"If-Match": ['Send the version the fact is expected at: 3 or "3".']}
        )
    return int(match.group(1) or match.group(2))


class _AcceptOf:
    """What DRF's ``get_accept_list`` reads of a request, its ``Accept`` header: in ``headers``
    (DRF's recent releases) and in ``META`` (its older ones)."""

    __slots__ = ("META", "headers")

    def __init__(self, request: Request) -> None:
        value = request_header(request, "Accept")
        self.headers = {} if value is None else {"accept": value}
        self.META = {} if value is None else {"HTTP_ACCEPT": value}


class _Negotiation(negotiation.DefaultContentNegotiation):
    """DRF's content negotiation, its ``Accept`` header read without ``request.headers``, and
    its answer given at once where the first renderer or parser plainly is the one it picks."""

    def get_accept_list(self, request: Request) -> list[str]:
        return super().get_accept_list(_AcceptOf(request))  # type: ignore[arg-type]

    def select_parser(self, request: Request, parsers: Any) -> Any:
        content_type = request.content_type
        if parsers and _plain(content_type) and parsers[0].media_type == content_type:
            return parsers[0]
        return super().select_parser(request, parsers)

    def select_renderer(
        self, request: Request, renderers: Any, format_suffix: str | None = None
    ) -> Any:
        # NOTE: with no format asked for and Accept absent, */* or the first renderer's type as
        # such, DRF's loop answers with that renderer and its type (a parameter or wildcard in
        # either, and the loop runs).
        if renderers and format_suffix is None and not request.META.get("QUERY_STRING"):
            first = renderers[0].media_type
            accept = request_header(request, "Accept")
            if _plain(first) and accept in (None, "*/*", first):
                return renderers[0], first
        return super().select_renderer(request, renderers, format_suffix)


def _plain(media_type: Any) -> bool:
    """Whether ``media_type`` is a type and subtype alone: no wildcard, no parameter."""
    return isinstance(media_type, str) and "/" in media_type and not set(media_type) & set("*; ")


class MemoryView(APIView):
    """Base of the app's views: JSON bodies, the owner check, and the app's error mapping."""

    permission_classes = [CanReachOwner]
    parser_classes = [JSONParser]
    schema = MemorySchema()
    # The query string of ``get``: in its schema, checked before it runs (a 400), as ``self.query``.
    query_serializer: type[Serializer[Any]] | None = None
    query: dict[str, Any]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # NOTE: every query parameter is single-valued: a repeat is refused, not read as its last
        # value. After the owner check, so it tells a stranger nothing.
        repeated = request.META.get("QUERY_STRING") and sorted(
            {k for k, v in request.query_params.lists() if len(v) > 1}
        )
        if repeated:
            raise exceptions.ValidationError({k: ["Give this parameter once."] for k in repeated})
        if self.query_serializer is not None and request.method in ("GET", "HEAD"):
            self.query = _validated(self.query_serializer, request.query_params.dict())

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        with ExitStack() as self._slots:
            self._heavy = False
            response = super().dispatch(request, *args, **kwargs)
            if self._heavy:
                # NOTE: rendered while the slot is held: the JSON of a long page is much of its
                # work.
                response.render()  # type: ignore[attr-defined]
        match = request.resolver_match
        counters.request_observed(
            view=match.view_name if match is not None else type(self).__name__,
            method=request.method or "",
            status=response.status_code,
            seconds=time.perf_counter() - started,
        )
        return response

    def heavy_read(self, request: Request, user_id: str) -> None:
        """Hold one of the caller's heavy-read slots until this response is rendered; raises
        ``ReadsInFlight`` (a 429) when all are held. A service caller's slots count per owner
        reached."""
        self._slots.enter_context(self.heavy_slot(request, user_id))
        self._heavy = True

    def heavy_slot(self, request: Request, user_id: str) -> ExitStack:
        """One of the caller's heavy-read slots (as ``heavy_read``), held until the stack
        returned is closed: a streamed response holds it until its stream ends."""
        slot = ExitStack()
        slot.enter_context(limits.heavy_read(caller=self.heavy_caller(request, user_id)))
        return slot

    def heavy_caller(self, request: Request, user_id: str) -> str:
        """Whose heavy-read slots a request holds (as ``heavy_read`` says)."""
        user = request.user
        own = owner_id_for(user) == user_id
        return f"user:{user.pk}" if own else f"owner:{user_id}"

    def get_content_negotiator(self) -> negotiation.BaseContentNegotiation:
        # NOTE: the site's class, unless it is DRF's default: then the same one reading one
        # header (with a token in the Authorization header, a POST builds no request.headers).
        if self.content_negotiation_class is not negotiation.DefaultContentNegotiation:
            return super().get_content_negotiator()
        if not getattr(self, "_negotiator", None):
            self._negotiator = _Negotiation()
        return self._negotiator

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
        # NOTE: a user's memory is personal: no shared or browser cache may keep a copy. Without
        # a Cache-Control of the view's own, the header patch_cache_control writes, at once.
        if response.has_header("Cache-Control"):
            patch_cache_control(response, no_store=True, private=True)
        else:
            response.headers["Cache-Control"] = _NOT_STORED
        return response


@csrf_exempt
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any other path under the API, such as a malformed user id or fact key: a JSON 404."""
    return JsonResponse(
        {"detail": "Not found."}, status=404, json_dumps_params={"separators": (",", ":")}
    )
