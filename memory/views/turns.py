"""``users/{user_id}/turns/`` and ``search/``: append, list and search turns."""

from __future__ import annotations

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
        idempotency_key = _idempotency_key(request)
        data = turn_input_accepted(request.data)
        if data is None:
            data = _validated(TurnInputSerializer, request.data)
        turn = services.turn_append(owner_id=user_id, idempotency_key=idempotency_key, **data)
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
