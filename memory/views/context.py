"""``users/{user_id}/context/``, ``context/messages/`` and ``summary/``."""

from __future__ import annotations

from django.urls import URLPattern, path
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from memory import limits, selectors
from memory.serializers import (
    ContextMessagesQuerySerializer,
    ContextMessagesSerializer,
    ContextQuerySerializer,
    ContextSerializer,
    SummarySerializer,
)
from memory.views.base import MemoryView, _validated
from memory.views.schema import owner_read


class ContextView(MemoryView):
    """``users/{user_id}/context/``: the facts and last turns, for the next model call."""

    @owner_read(
        "context_get",
        "The context for the next reply",
        ContextSerializer,
        parameters=[ContextQuerySerializer],
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

    query_serializer = ContextMessagesQuerySerializer

    @owner_read(
        "context_messages",
        "The context as model messages, within a token budget",
        ContextMessagesSerializer,
    )
    def get(self, request: Request, user_id: str) -> Response:
        query = self.query
        heavy = limits.context_heavy(turns=query.get("turns"), max_tokens=query.get("max_tokens"))
        if heavy or "query" in query:
            # NOTE: a recall is a search: it takes a heavy-read slot as search does.
            self.heavy_read(request, user_id)
        return Response(selectors.context_messages(owner_id=user_id, **query))


class SummaryView(MemoryView):
    """``users/{user_id}/summary/``: the owner's summary of its older turns; 404 while none."""

    @owner_read(
        "summary_get",
        "The summary of the user's turns 1..through_seq (404 while there is none)",
        SummarySerializer,
    )
    def get(self, request: Request, user_id: str) -> Response:
        summary = selectors.summary_get(owner_id=user_id)
        if summary is None:
            raise exceptions.NotFound("The user has no summary yet.")
        return Response(summary)


urlpatterns: list[URLPattern] = [
    path("context/", ContextView.as_view(), name="context"),
    path("context/messages/", ContextMessagesView.as_view(), name="context-messages"),
    path("summary/", SummaryView.as_view(), name="summary"),
]
