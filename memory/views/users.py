"""``users/{user_id}/``: the owner as a whole: forget it, link an anonymous owner to it, export its
whole memory as one JSON document, streamed."""

from __future__ import annotations

from django.http import Http404, StreamingHttpResponse
from django.urls import URLPattern, path
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from memory import selectors, services
from memory.downloads import export_response
from memory.permissions import can_reach
from memory.serializers import (
    ExportSerializer,
    LinkInputSerializer,
    LinkResultSerializer,
)
from memory.views.base import MemoryView, _validated
from memory.views.schema import (
    WRITE_ERRORS,
    owner_operation,
    owner_read,
)


class UserView(MemoryView):
    """``users/{user_id}/``: forget the owner."""

    @owner_operation(
        "memory_forget",
        "Forget the user: every turn, fact, version and session",
        {204: None},
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


class ExportView(MemoryView):
    """``users/{user_id}/export/``: every fact, version, turn and session of the owner."""

    @owner_read(
        "owner_export",
        "Export the user's whole memory (access and portability requests)",
        OpenApiResponse(
            ExportSerializer,
            description="The owner's whole memory as one document (an owner with "
            "nothing stored: empty lists), streamed from one snapshot; a download "
            "(Content-Disposition: attachment).",
        ),
    )
    def get(self, request: Request, user_id: str) -> StreamingHttpResponse:
        # NOTE: the slot and the snapshot are taken here, so that a 429, 400 or 503 is an
        # answer; once the first byte is out, a failure can only cut the document short.
        slot = self.heavy_slot(request, user_id)
        try:
            stream = selectors.owner_export(owner_id=user_id)
        except BaseException:
            slot.close()
            raise
        return export_response(request._request, user_id, stream, slot)


urlpatterns: list[URLPattern] = [
    path("", UserView.as_view(), name="user"),
    path("link/", LinkView.as_view(), name="link"),
    path("export/", ExportView.as_view(), name="export"),
]
