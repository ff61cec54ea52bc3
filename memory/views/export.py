"""``users/{user_id}/export/``: the owner's whole memory as one JSON document, streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request

from memory import selectors
from memory.selectors import ExportStream
from memory.serializers import ExportSerializer
from memory.views.base import READ_ERRORS, USER_ID, MemoryView, schema_responses


class _Chunks:
    """An export's chunks for a streamed response, with the caller's heavy-read slot held
    until they end or the response is closed (or dropped: an ASGI client gone)."""

    def __init__(self, stream: ExportStream, slot: ExitStack) -> None:
        self._stream, self._slot = stream, slot

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._slot.close()

    def __del__(self) -> None:
        self.close()


class _SyncChunks(_Chunks):
    """For WSGI: the server iterates the response in the request's thread."""

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        chunk = self._stream.read()
        if chunk is None:
            self.close()
            raise StopIteration
        return chunk


class _AsyncChunks(_Chunks):
    """For ASGI: one hop to sync code per chunk (Django would read a sync iterator whole)."""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        chunk = await sync_to_async(self._stream.read, thread_sensitive=True)()
        if chunk is None:
            await sync_to_async(self.close, thread_sensitive=True)()
            raise StopAsyncIteration
        return chunk


class ExportView(MemoryView):
    """``users/{user_id}/export/``: every fact, version, turn and session of the owner."""

    @extend_schema(
        tags=["users"],
        parameters=[USER_ID],
        responses=schema_responses(
            {
                200: OpenApiResponse(
                    ExportSerializer,
                    description="The owner's whole memory as one document (an owner with "
                    "nothing stored: empty lists), streamed from one snapshot; a download "
                    "(Content-Disposition: attachment).",
                )
            },
            READ_ERRORS,
        ),
        summary="Export the user's whole memory (access and portability requests)",
        operation_id="owner_export",
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


def export_response(
    request: HttpRequest, owner_id: str, stream: ExportStream, slot: ExitStack | None = None
) -> StreamingHttpResponse:
    """A download of an open export (the API's and the admin's): streamed by the server, sync
    under WSGI, async under ASGI; ``slot`` is closed with the stream."""
    slot = slot if slot is not None else ExitStack()
    asgi = isinstance(request, ASGIRequest)
    chunks = _AsyncChunks(stream, slot) if asgi else _SyncChunks(stream, slot)
    response = StreamingHttpResponse(chunks, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="memory-{owner_id}.json"'
    return response
