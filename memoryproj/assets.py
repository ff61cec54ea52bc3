"""Files the demo's pages ask for, served by the project itself so that nothing is loaded from
another host: the site's icon (``/favicon.ico``) and Redoc's bundle without its logo's address
on Redoc's CDN."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from django.contrib.staticfiles import finders
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

FAVICON = Path(__file__).resolve().parent / "static" / "memoryproj" / "favicon.ico"
# drf-spectacular-sidecar's Redoc, as its static files hold it.
REDOC_BUNDLE = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
# NOTE: Redoc's sidebar footer shows an image from its CDN, whatever its options say; an empty
# transparent image in its place, so that the page asks no other host for anything.
REDOC_LOGO = b'src:"https://cdn.redoc.ly/redoc/logo-mini.svg"'
BLANK_IMAGE = (
    b'src:"data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7"'
)
# How long a browser may keep these (they change only with a new release of the demo).
MAX_AGE = 86400


def _cached(body: bytes, content_type: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Cache-Control"] = f"public, max-age={MAX_AGE}"
    return response


@cache
def _favicon_bytes() -> bytes:
    return FAVICON.read_bytes()


@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """The demo's icon, from this repository."""
    return _cached(_favicon_bytes(), "image/x-icon")


@cache
def _redoc_bytes() -> bytes | None:
    path = finders.find(REDOC_BUNDLE)
    if path is None:
        return None
    body = Path(path).read_bytes().replace(REDOC_LOGO, BLANK_IMAGE)
    # NOTE: the source map is not served: a browser's developer tools would ask for it.
    head, found, _ = body.rpartition(b"\n//# sourceMappingURL=")
    return head + b"\n" if found else body


@require_safe
def redoc_bundle(request: HttpRequest) -> HttpResponse:
    """drf-spectacular-sidecar's Redoc bundle, its logo an empty image of the page's own;
    404 where the sidecar is not installed."""
    body = _redoc_bytes()
    if body is None:
        raise Http404("drf-spectacular-sidecar is not installed")
    return _cached(body, "text/javascript; charset=utf-8")
