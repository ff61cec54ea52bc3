"""Request bodies capped before anything reads them, under ASGI (``CappedASGI``) and WSGI
(``CappedWSGI``).

The cap is ``DATA_UPLOAD_MAX_MEMORY_SIZE``, which Django applies only once a view reads the body,
after the server read it all. A ``Content-Length`` over the cap is a 413 before a byte is read; a
chunked body is read here up to the cap (a 413 past it) and handed on with its ``Content-Length``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from django.conf import settings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

# Bytes read from a WSGI server's chunked body at a time.
READ = 64 * 1024


def body_cap() -> int | None:
    """The most bytes a request body may have (``DATA_UPLOAD_MAX_MEMORY_SIZE``), re-read on each
    request; ``None``: no cap."""
    cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return None if cap is None else int(cap)


def _refusal(status: int, cap: int) -> tuple[bytes, list[tuple[str, str]]]:
    detail = (
        f"The request body is larger than {cap} bytes."
        if status == 413
        else "The Content-Length header is not a number of bytes."
    )
    body = json.dumps({"detail": detail}).encode()
    # NOTE: the rest of the body is not read: the connection cannot serve another request.
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("Connection", "close"),
    ]
    return body, headers


class CappedASGI:
    """``app`` with request bodies capped: see the module's docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        cap = body_cap()
        if scope["type"] != "http" or cap is None:
            await self.app(scope, receive, send)
            return
        headers = list(scope.get("headers") or [])
        lengths = [value for name, value in headers if name.lower() == b"content-length"]
        if lengths:
            if not all(length.isdigit() for length in lengths):
                await self._refuse(send, 400, cap)
            elif int(lengths[0]) > cap:
                await self._refuse(send, 413, cap)
            else:
                # NOTE: the server delivers no more than Content-Length says.
                await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            if len(body) > cap:
                await self._refuse(send, 413, cap)
                return
            if not message.get("more_body", False):
                break
        if body:
            scope = {**scope, "headers": [*headers, (b"content-length", b"%d" % len(body))]}
        await self.app(scope, _replay(bytes(body), receive), send)

    @staticmethod
    async def _refuse(send: Send, status: int, cap: int) -> None:
        body, headers = _refusal(status, cap)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(name.lower().encode(), value.encode()) for name, value in headers],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` whole first, then what ``receive`` gives (a disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class CappedWSGI:
    """``app`` with request bodies capped: see the module's docstring."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        cap = body_cap()
        if cap is None:
            return self.app(environ, start_response)
        length = environ.get("CONTENT_LENGTH") or ""
        if length:
            if not (length.isascii() and length.isdigit()):
                return self._refuse(start_response, 400, cap)
            if int(length) > cap:
                return self._refuse(start_response, 413, cap)
            return self.app(environ, start_response)
        if "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
            stream, body = environ["wsgi.input"], bytearray()
            while len(body) <= cap:
                data = stream.read(min(READ, cap + 1 - len(body)))
                if not data:
                    break
                body += data
            if len(body) > cap:
                return self._refuse(start_response, 413, cap)
            environ["wsgi.input"] = io.BytesIO(bytes(body))
            environ["CONTENT_LENGTH"] = str(len(body))
        return self.app(environ, start_response)

    @staticmethod
    def _refuse(start_response: Callable[..., Any], status: int, cap: int) -> list[bytes]:
        body, headers = _refusal(status, cap)
        reason = "Content Too Large" if status == 413 else "Bad Request"
        # NOTE: no Connection header under WSGI (hop-by-hop): the server drains what it may of
        # the rest, then closes.
        start_response(f"{status} {reason}", [h for h in headers if h[0] != "Connection"])
        return [body]
