"""A lost database is a 503 on every page of the demo, never a 500: in a view (the
middleware) and outside one (``server_error``, the project's ``handler500``)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.template.loader import render_to_string
from django.views import defaults

from memory.exceptions import MemoryUnavailable, unavailable_log
from memoryproj.chat import UNAVAILABLE

# The errors of a database that cannot be reached, as the memory API maps them to 503.
DATABASE_ERRORS = (OperationalError, InterfaceError, MemoryUnavailable)
# Pages that answer JSON, whose 503 is JSON too.
JSON_PAGES = frozenset({"chat-stream"})


def unavailable(request: HttpRequest) -> HttpResponse:
    """The 503 of a page that lost its database: ``{"detail": ...}`` for the pages that answer
    JSON and clients that want it, else an HTML page."""
    match = getattr(request, "resolver_match", None)
    if (match is not None and match.url_name in JSON_PAGES) or not request.accepts("text/html"):
        return JsonResponse({"detail": UNAVAILABLE}, status=503)
    # NOTE: rendered without the request: its context processors would look the user up,
    # in the database that is lost.
    html = render_to_string(
        "memoryproj/unavailable.html", {"message": UNAVAILABLE, "path": request.path}
    )
    return HttpResponse(html, status=503)


class DatabaseUnavailableMiddleware:
    """A lost database in a view is a 503: the session or its user looked up, the page's own
    queries, any view that lets the error out (DRF's views answer their own 503s)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, DATABASE_ERRORS):
            return None
        if not isinstance(exception, MemoryUnavailable):
            unavailable_log(exception)
        return unavailable(request)


def server_error(request: HttpRequest) -> HttpResponse:
    """The project's ``handler500``: a lost database outside any view (the session saved after
    it, by the session middleware) is a 503 too; anything else Django's 500 page."""
    # NOTE: Django calls it inside the except block of the error it answers.
    error = sys.exc_info()[1]
    if isinstance(error, DATABASE_ERRORS):
        if not isinstance(error, MemoryUnavailable):
            unavailable_log(error)
        return unavailable(request)
    return defaults.server_error(request)
