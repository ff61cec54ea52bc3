"""``users/{user_id}/export/``: the owner's whole memory as one JSON document, streamed."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from django.urls import URLPattern, path
from drf_spectacular.utils import OpenApiResponse
from rest_framework.request import Request

from memory import selectors
from memory.downloads import export_response
from memory.serializers import ExportSerializer
from memory.views.base import MemoryView
from memory.views.schema import owner_operation


class ExportView(MemoryView):
    """``users/{user_id}/export/``: every fact, version, turn and session of the owner."""

    @owner_operation(
        "owner_export",
        "Export the user's whole memory (access and portability requests)",
        {
            200: OpenApiResponse(
                ExportSerializer,
                description="The owner's whole memory as one document (an owner with "
                "nothing stored: empty lists), streamed from one snapshot; a download "
                "(Content-Disposition: attachment).",
            )
        },
        tag="users",
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


urlpatterns: list[URLPattern] = [path("export/", ExportView.as_view(), name="export")]
