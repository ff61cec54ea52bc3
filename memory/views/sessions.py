"""``users/{user_id}/sessions/``: the session labels of the owner's turns."""

from __future__ import annotations

from django.urls import URLPattern, path
from rest_framework.request import Request
from rest_framework.response import Response

from memory import selectors
from memory.serializers import PageQuerySerializer, SessionListSerializer
from memory.views.base import MemoryView, _next_url
from memory.views.schema import owner_read


class SessionsView(MemoryView):
    """``users/{user_id}/sessions/``: the session labels of the owner's turns, paged."""

    query_serializer = PageQuerySerializer

    @owner_read("session_list", "List sessions, most recently seen first", SessionListSerializer)
    def get(self, request: Request, user_id: str) -> Response:
        sessions, cursor = selectors.session_list(owner_id=user_id, **self.query)
        return Response({"results": sessions, "next": _next_url(request, cursor)})


urlpatterns: list[URLPattern] = [path("sessions/", SessionsView.as_view(), name="sessions")]
