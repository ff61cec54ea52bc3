"""``users/{user_id}/``: forget; its sessions; linking an anonymous owner."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from django.urls import URLPattern, path
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from memory import selectors, services
from memory.permissions import can_reach
from memory.serializers import (
    LinkInputSerializer,
    LinkResultSerializer,
    PageQuerySerializer,
    SessionListSerializer,
)
from memory.views.base import MemoryView, _next_url, _validated, owner_query_operation
from memory.views.schema import (
    CURSOR_400,
    WRITE_ERRORS,
    owner_operation,
)


class SessionsView(MemoryView):
    """``users/{user_id}/sessions/``: the session labels of the owner's turns, paged."""

    @owner_query_operation(
        PageQuerySerializer,
        "session_list",
        "List sessions, most recently seen first",
        {200: SessionListSerializer},
        tag="sessions",
        bad_input=CURSOR_400,
    )
    def get(self, request: Request, user_id: str, *, query: dict[str, Any]) -> Response:
        sessions, cursor = selectors.session_list(owner_id=user_id, **query)
        return Response({"results": sessions, "next": _next_url(request, cursor)})


class UserView(MemoryView):
    """``users/{user_id}/``: forget the owner."""

    @owner_operation(
        "memory_forget",
        "Forget the user: every turn, fact, version and session",
        {204: None},
        tag="users",
    )
    def delete(self, request: Request, user_id: str) -> Response:
        services.memory_forget(owner_id=user_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class LinkView(MemoryView):
    """``users/{user_id}/link/``: move an anonymous owner's memory to the user, forget it."""

    @owner_operation(
        "memory_link",
        "Link an anonymous user to this one (idempotent)",
        {200: LinkResultSerializer},
        WRITE_ERRORS,
        tag="users",
        request=LinkInputSerializer,
        bad_input='Invalid input, as {"field": ["message"]}; also a query parameter given '
        "twice, or a user linked to itself.",
    )
    def post(self, request: Request, user_id: str) -> Response:
        from_user_id = _validated(LinkInputSerializer, request.data)["from_user_id"]
        if not can_reach(request.user, from_user_id):
            # NOTE: as for the URL's owner (CanReachOwner): 404, and nothing of either changes.
            raise Http404
        result = services.memory_link(owner_id=user_id, from_owner_id=from_user_id)
        return Response(result._asdict())


urlpatterns: list[URLPattern] = [
    path("", UserView.as_view(), name="user"),
    path("sessions/", SessionsView.as_view(), name="sessions"),
    path("link/", LinkView.as_view(), name="link"),
]
