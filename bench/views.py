"""The HTTP baselines: a bare DRF view that answers a constant, with the project's defaults
(token authentication, ``IsAuthenticated``), so that a ratio against it isolates the app; and the
append's floor behind the same DRF (``FloorView``), so that a POST's ratio can be read against
the least a durable append costs."""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import connection
from django_redis import get_redis_connection
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bench.floor import floor_append
from memory.conf import conf

CONSTANT = {"ok": True}


class BareView(APIView):
    """``GET`` or ``POST``: ``{"ok": true}``, after the same authentication as the real API."""

    def get(self, request: Request) -> Response:
        return Response(CONSTANT)

    def post(self, request: Request) -> Response:
        return Response(CONSTANT, status=201)


class FloorView(APIView):
    """``POST {"session_id", "content"}``: a user turn stored the floor's way (``bench.floor``,
    prepared on the request's database connection), after the project's default authentication
    (on a view without ``CanReachOwner``, DRF's token lookup) and DRF's JSON parsing; answers
    ``{"seq": n}``, 201. The owner and its session exist."""

    def post(self, request: Request, owner_id: str) -> Response:
        data: Any = request.data
        if not isinstance(data, dict):
            raise ParseError("a JSON object")
        connection.ensure_connection()
        raw = connection.connection

        def execute(sql: str, params: dict[str, Any]) -> Any:
            # NOTE: Django turns psycopg's preparing off on its connections (a threshold of None,
            # which ignores prepare=True); on for this statement, as raw psycopg would run it.
            threshold, raw.prepare_threshold = raw.prepare_threshold, 0
            try:
                return psycopg.Cursor(raw).execute(sql, params, prepare=True)
            finally:
                raw.prepare_threshold = threshold

        seq = floor_append(
            execute,
            get_redis_connection(conf.CACHE_ALIAS),
            owner=owner_id,
            session=str(data["session_id"]),
            content=str(data["content"]),
            key=f"{conf.KEY_PREFIX}:floor:{owner_id}",
            ttl=conf.CACHE_TTL,
        )
        return Response({"seq": seq}, status=201)
