"""Whether the database and the cache answer, for ``health/``."""

from __future__ import annotations

import time
from typing import Literal, NotRequired, TypedDict

from django.db import DatabaseError, connection, connections

from memory import aio, cache
from memory.conf import conf


class HealthLatency(TypedDict):
    database: float
    cache: float | None


class ReadReplicaHealth(TypedDict):
    reachable: bool
    lag_bytes: int | None


class HealthPayload(TypedDict):
    database: Literal["ok", "down"]
    cache: Literal["ok", "down", "disabled"]
    latency_ms: HealthLatency
    cache_replicas: NotRequired[Literal["ok", "behind"]]
    database_primary: NotRequired[int | None]
    read_replica: NotRequired[ReadReplicaHealth]


def _lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


def _primary_index() -> int | None:
    """Of the hosts the default database names (libpq's multi-host form), the index of the one
    this process is connected to: the primary (``target_session_attrs=read-write``)."""
    hosts = str(connection.settings_dict.get("HOST") or "").split(",")
    ports = str(connection.settings_dict.get("PORT") or "").split(",")
    info = getattr(connection.connection, "info", None)
    if info is None:
        return None
    for index, host in enumerate(hosts):
        port = ports[index] if len(ports) == len(hosts) else ports[0]
        if host == info.host and str(port) == str(info.port):
            return index
    return None


def _read_replica(alias: str) -> ReadReplicaHealth:
    """Whether the read replica answers, and how many bytes of WAL it has yet to replay."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_lsn()::text")
            primary = _lsn(cursor.fetchone()[0])
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT pg_last_wal_replay_lsn()::text")
            replayed = cursor.fetchone()[0]
    except DatabaseError:
        connections[alias].close()
        return {"reachable": False, "lag_bytes": None}
    return {
        "reachable": True,
        "lag_bytes": max(primary - _lsn(replayed), 0) if replayed is not None else None,
    }


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def health_get() -> HealthPayload:
    """Whether the database answers a query and the cache a PING, and how many milliseconds
    each took (also when it failed: a timeout shows as such); the cache's is None when no
    cache is configured. With ``MEMORY["CACHE_REPLICAS"]``, ``cache_replicas`` says whether
    this process's last cache update reached its replicas. With several database hosts,
    ``database_primary`` is the index (in ``HOST``) of the one this process writes to; with
    ``MEMORY["READ_DATABASE"]``, ``read_replica`` says whether the replica answers and how many
    bytes of WAL it has yet to replay (no address in either). Never raises."""
    started = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database: Literal["ok", "down"] = "ok"
    except DatabaseError:
        database = "down"
        connection.close()
    database_ms = _elapsed_ms(started)
    started = time.perf_counter()
    state = cache.ping()
    cache_ms = None if state == "disabled" else _elapsed_ms(started)
    health: HealthPayload = {
        "database": database,
        "cache": state,
        "latency_ms": {"database": database_ms, "cache": cache_ms},
    }
    if database == "ok" and connection.vendor == "postgresql":
        if "," in str(connection.settings_dict.get("HOST") or ""):
            health["database_primary"] = _primary_index()
        if conf.READ_DATABASE is not None:
            health["read_replica"] = _read_replica(conf.READ_DATABASE)
    if conf.CACHE_REPLICAS and state != "disabled":
        # What this process's last replicated update found, not a probe of its own.
        health["cache_replicas"] = cache.replicas_state()
    return health


ahealth_get = aio.twin(health_get)
