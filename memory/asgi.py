"""``health/`` answered ahead of Django under ASGI: ``HealthFastPath`` wraps a site's ASGI
application and answers a plain ``GET`` of the memory API's ``health/`` on the event loop;
under WSGI, and for every other request, the view answers (``memory.views.health.HealthView``)."""

from __future__ import annotations

import asyncio
import io
import math
import time
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import DisallowedHost, ImproperlyConfigured
from django.core.handlers.asgi import ASGIRequest
from django.db import DatabaseError, close_old_connections
from django.http import HttpResponse
from django.urls import NoReverseMatch, Resolver404, get_script_prefix, resolve, reverse
from django.utils.log import log_response

if TYPE_CHECKING:
    from memory.selectors import HealthPayload

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Accept headers (besides none) for which DRF picks the site's first renderer.
JSON_ACCEPTS = frozenset({b"*/*", b"application/json"})
# The headers of the view's answer that are the view's own (the site's middleware adds others).
HEADERS = (
    ("Content-Type", "application/json"),
    ("Vary", "Accept"),
    ("Allow", "GET, HEAD, OPTIONS"),
    ("Cache-Control", "no-store, private"),
)


def _probe() -> tuple[float, HealthPayload]:
    """``selectors.health_get()`` as a request would run it, old connections closed before and
    after; when it began (``time.monotonic()``) and what it found."""
    from memory import selectors

    began = time.monotonic()
    # NOTE: a connection that cannot even be closed is gone: the probe reconnects.
    with suppress(DatabaseError):
        close_old_connections()
    try:
        return began, selectors.health_get()
    finally:
        with suppress(DatabaseError):
            close_old_connections()


_aprobe = sync_to_async(_probe, thread_sensitive=True)


class HealthFastPath:
    """``app``, with ``GET health/`` of the memory API answered on the event loop.

    The answer is the view's (200, or 503 when the database is down, with the view's own headers),
    from a probe begun at most ``max_age`` seconds before; a request finding the last probe older
    than a quarter of that starts the next. ``max_age=0`` probes per request. Answered here only
    for a plain ``GET`` (no query string, JSON ``Accept``, an allowed host) while DRF's JSON
    renderer is first; counted in the metrics and logged as the view's answer. No middleware or
    request signal runs. Anything else goes to ``app``. Why: docs/performance.md.
    """

    def __init__(self, app: ASGIApp, *, max_age: float = 0.25) -> None:
        self.app = app
        self.max_age = max_age
        # ROOT_URLCONF, and where health/ is in it (``_find_health``).
        self._route: tuple[str, tuple[str, str] | None] | None = None
        self._last: tuple[float, HealthPayload] | None = None
        self._next: asyncio.Task[tuple[float, HealthPayload]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self._health_request(scope)
        if found is None:
            await self.app(scope, receive, send)
            return
        from memory import counters
        from memory.views.renderers import JSONRenderer

        request, view_name = found
        started = time.perf_counter()
        health = await self._health()
        status = 200 if health["database"] == "ok" else 503
        body = JSONRenderer().render(health, "application/json", {})
        headers = [*HEADERS, ("Content-Length", str(len(body)))]
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(name.encode(), value.encode()) for name, value in headers],
            }
        )
        await send({"type": "http.response.body", "body": body})
        counters.request_observed(
            view=view_name, method="GET", status=status, seconds=time.perf_counter() - started
        )
        if status >= 500:
            response = HttpResponse(body, status=status, content_type="application/json")
            # NOTE: in a thread, as Django logs its own: a handler may block.
            await sync_to_async(log_response, thread_sensitive=False)(
                "%s: %s", response.reason_phrase, request.path, response=response, request=request
            )

    def _health_request(self, scope: Scope) -> tuple[ASGIRequest, str] | None:
        """The request of ``scope`` and the view's name, if the fast path answers it."""
        if scope["type"] != "http" or scope.get("method") != "GET" or scope.get("query_string"):
            return None
        route = self._health_route()
        if route is None or not str(scope.get("path", "")).endswith(route[0]):
            return None
        accepts = [value for name, value in scope.get("headers") or () if name == b"accept"]
        if len(accepts) > 1 or (accepts and accepts[0].strip() not in JSON_ACCEPTS):
            return None
        request = ASGIRequest(scope, io.BytesIO())
        if request.path_info != route[0]:
            return None
        try:
            request.get_host()
        except DisallowedHost:
            # Django answers it (400), as for any other view.
            return None
        return request, route[1]

    def _health_route(self) -> tuple[str, str] | None:
        """Where ``health/`` is in ``ROOT_URLCONF`` and its view's name; None when absent, not the
        memory API's, or not JSON by default. Found once per ``ROOT_URLCONF``."""
        urlconf = str(settings.ROOT_URLCONF)
        if self._route is None or self._route[0] != urlconf:
            self._route = (urlconf, _find_health())
        return self._route[1]

    async def _health(self) -> HealthPayload:
        """The last probe's result, or the next one's: see the class's docstring."""
        last = self._last
        age = math.inf if last is None else time.monotonic() - last[0]
        # NOTE: the next probe begins at a quarter of max_age, so that it has three quarters to end
        # before a request waits: at a half, a probe slowed by heavy reads' threads (the lock
        # handed over at each of its steps) ended past max_age, and health/ waited for it.
        if last is not None and age < self.max_age / 4:
            return last[1]
        probing = self._next
        loop = asyncio.get_running_loop()
        if probing is None or probing.done() or probing.get_loop() is not loop:
            probing = self._next = loop.create_task(self._refresh())
        if last is not None and age < self.max_age:
            return last[1]
        # NOTE: shielded: a request that goes away does not end the probe others may await.
        return (await asyncio.shield(probing))[1]

    async def _refresh(self) -> tuple[float, HealthPayload]:
        began, health = await _aprobe()
        if self._last is None or began >= self._last[0]:
            self._last = (began, health)
        return began, health


def _find_health() -> tuple[str, str] | None:
    from rest_framework import renderers

    from memory.views.health import HealthView
    from memory.views.renderers import JSONRenderer

    try:
        path = "/" + reverse("memory:health").removeprefix(get_script_prefix())
        match = resolve(path)
    except (NoReverseMatch, Resolver404, ImproperlyConfigured):
        return None
    if getattr(match.func, "view_class", None) is not HealthView:
        return None
    first = HealthView.renderer_classes[0] if HealthView.renderer_classes else None
    if first is not renderers.JSONRenderer and first is not JSONRenderer:
        return None
    return path, match.view_name
