"""An open export as an HTTP download: the one response that the API's export view and the
admin's export action both send."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse

from memory.selectors.export import ExportStream


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
