"""The serializers of ``health/``: what the database, the cache and a read replica answer."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


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
