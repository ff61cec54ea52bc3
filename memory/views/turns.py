"""``users/{user_id}/turns/`` and ``search/``: append, list and search turns."""

from __future__ import annotations

from typing import Any

from django.urls import URLPattern, path
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from memory import limits, selectors, services
from memory.conf import conf
from memory.payloads import turn_payload
from memory.serializers import (
    SearchQuerySerializer,
    TurnInputSerializer,
    TurnListQuerySerializer,
    TurnPageSerializer,
    TurnSearchSerializer,
    TurnSerializer,
    turn_input_accepted,
)
from memory.services.turns import turn_append_reached
from memory.views.access import TokenAccess, append_access
from memory.views.base import MemoryView, _idempotency_key, _validated
from memory.views.schema import (
    IDEMPOTENCY_KEY,
    WRITE_ERRORS,
    owner_operation,
    owner_read,
)


class TurnsView(MemoryView):
    """``users/{user_id}/turns/``: append a turn; list turns, oldest first."""

    query_serializer = TurnListQuerySerializer

    # NOTE: an append may leave DRF's checks to its own statement (``append_access``): one
    # round trip for the request; any error before it runs the checks first, as DRF orders them.
    _access: TokenAccess | None = None

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self._access = append_access(request, self) if request.method == "POST" else None
        super().initial(request, *args, **kwargs)

    def perform_authentication(self, request: Request) -> None:
        if self._access is None:
            super().perform_authentication(request)

    def check_permissions(self, request: Request) -> None:
        if self._access is None:
            super().check_permissions(request)

    def check_throttles(self, request: Request) -> None:
        if self._access is None:
            super().check_throttles(request)

    @owner_operation(
        "turn_append",
        "Append a turn",
        {
            201: OpenApiResponse(
                TurnSerializer, description="The turn, or on a retry the turn first stored."
            )
        },
        (*WRITE_ERRORS, 422),
        parameters=[IDEMPOTENCY_KEY],
        request=TurnInputSerializer,
    )
    def post(self, request: Request, user_id: str) -> Response:
        access = self._access
        try:
            idempotency_key = _idempotency_key(request)
            data = turn_input_accepted(request.data)
            if data is None:
                data = _validated(TurnInputSerializer, request.data)
            if access is None:
                turn = services.turn_append(
                    owner_id=user_id, idempotency_key=idempotency_key, **data
                )
            else:
                turn = turn_append_reached(
                    access, owner_id=user_id, idempotency_key=idempotency_key, **data
                )
        except Exception:
            if access is not None:
                access.require()
            raise
        # NOTE: a retry answers exactly as the first try did: 201 and the turn first stored.
        return Response(turn_payload(turn), status=status.HTTP_201_CREATED)

    @owner_read("turn_list", "List turns, oldest first", TurnPageSerializer)
    def get(self, request: Request, user_id: str) -> Response:
        query = self.query
        if limits.page_heavy(limit=query["limit"]):
            self.heavy_read(request, user_id)
        turns, more = selectors.turn_list(owner_id=user_id, max_bytes=conf.MAX_PAGE_BYTES, **query)
        next_url = None
        if more:
            next_url = replace_query_param(request.build_absolute_uri(), "after", turns[-1]["seq"])
        return Response({"results": turns, "next": next_url})


class SearchView(MemoryView):
    """``users/{user_id}/search/?q=``: the owner's turns that match a text, best match first."""

    query_serializer = SearchQuerySerializer

    @owner_read("turn_search", "Search turns by content, best match first", TurnSearchSerializer)
    def get(self, request: Request, user_id: str) -> Response:
        self.heavy_read(request, user_id)
        return Response({"results": selectors.turn_search(owner_id=user_id, **self.query)})


urlpatterns: list[URLPattern] = [
    path("turns/", TurnsView.as_view(), name="turns"),
    path("search/", SearchView.as_view(), name="search"),
]
