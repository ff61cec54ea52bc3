"""The serializers of ``health/``: whether the database and the cache answer, and how fast."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class HealthLatencySerializer(serializers.Serializer[dict[str, Any]]):
    """Milliseconds each dependency took to answer the health probe (null: no cache)."""

    database = serializers.FloatField()
    cache = serializers.FloatField(allow_null=True)


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
