"""``health/``: what the database, the cache and a read replica answer (the view, open to
load-balancer probes, and its serializers)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from memory import selectors
from memory.views.base import MemoryView
from memory.views.schema import ERRORS


class HealthLatencySerializer(serializers.Serializer[dict[str, Any]]):
    """Milliseconds each dependency took to answer the health probe (null: no cache)."""

    database = serializers.FloatField()
    cache = serializers.FloatField(allow_null=True)


class ReadReplicaHealthSerializer(serializers.Serializer[dict[str, Any]]):
    """The read replica (MEMORY['READ_DATABASE']): whether it answers, how far it is behind."""

    reachable = serializers.BooleanField()
    lag_bytes = serializers.IntegerField(
        allow_null=True,
        help_text="Bytes of WAL the primary wrote that the replica has not replayed yet.",
    )


class HealthSerializer(serializers.Serializer[dict[str, Any]]):
    """Whether the database and the cache answer, and how fast."""

    database = serializers.ChoiceField(choices=["ok", "down"])
    cache = serializers.ChoiceField(choices=["ok", "down", "disabled"])
    latency_ms = HealthLatencySerializer()
    cache_replicas = serializers.ChoiceField(
        choices=["ok", "behind"],
        required=False,
        help_text="With MEMORY['CACHE_REPLICAS']: whether this instance's last cache update "
        "reached the replicas it waits for ('behind': updates count as not landed and are "
        "repaired, so owners written meanwhile are read from the database).",
    )
    database_primary = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="With several database hosts (libpq's multi-host HOST): the index, in HOST, "
        "of the primary this instance is connected to (null: none of them).",
    )
    read_replica = ReadReplicaHealthSerializer(
        required=False, help_text="With MEMORY['READ_DATABASE']: the read replica."
    )


class HealthView(MemoryView):
    """``health/``: whether the database and the cache answer; open to load-balancer probes."""

    # NOTE: no authentication (a bad token must not fail a probe), no throttle (probes are
    # frequent), and nothing in the answer but two words.
    authentication_classes = ()
    permission_classes = [AllowAny]
    throttle_classes = ()

    @extend_schema(
        tags=["health"],
        responses={
            200: OpenApiResponse(HealthSerializer, description="The database answers."),
            400: OpenApiResponse(
                OpenApiTypes.OBJECT, description="A query parameter given more than once."
            ),
            414: ERRORS[414],
            503: OpenApiResponse(HealthSerializer, description="The database is down."),
        },
        summary="Health of the database and the cache",
        operation_id="health_get",
    )
    def get(self, request: Request) -> Response:
        health = selectors.health_get()
        ok = health["database"] == "ok"
        return Response(health, status=200 if ok else status.HTTP_503_SERVICE_UNAVAILABLE)
