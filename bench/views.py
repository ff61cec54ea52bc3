"""The HTTP baseline: a bare DRF view that answers a constant, with the project's defaults
(token authentication, ``IsAuthenticated``), so that a ratio against it isolates the app."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

CONSTANT = {"ok": True}


class BareView(APIView):
    """``GET`` or ``POST``: ``{"ok": true}``, after the same authentication as the real API."""

    def get(self, request: Request) -> Response:
        return Response(CONSTANT)

    def post(self, request: Request) -> Response:
        return Response(CONSTANT, status=201)
