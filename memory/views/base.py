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
from django.utils.cache import patch_cache_control
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, renderers
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

__all__ = ["IF_MATCH_RE", "MemoryView", "not_found", "request_actor"]

IF_MATCH_RE = re.compile(r'\s*(?:([0-9]{1,18})|"([0-9]{1,18})")\s*')


def _validated(serializer_class: type[Serializer[Any]], data: Any) -> dict[str, Any]:
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
    return replace_query_param(request.build_absolute_uri(), "cursor", cursor)


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
        repeated = sorted({k for k, v in request.query_params.lists() if len(v) > 1})
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
        return response


@csrf_exempt
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any other path under the API, such as a malformed user id or fact key: a JSON 404."""
    return JsonResponse(
        {"detail": "Not found."}, status=404, json_dumps_params={"separators": (",", ":")}
    )
