"""Whether the database and the cache answer, for ``health/``."""

from __future__ import annotations

import time
from typing import Literal, NotRequired, TypedDict

from django.db import DatabaseError, connection

from memory import aio, cache
from memory.conf import conf


class HealthLatency(TypedDict):
    database: float
    cache: float | None


class HealthPayload(TypedDict):
    database: Literal["ok", "down"]
    cache: Literal["ok", "down", "disabled"]
    latency_ms: HealthLatency
    cache_replicas: NotRequired[Literal["ok", "behind"]]


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def health_get() -> HealthPayload:
    """Whether the database answers a query and the cache a PING, and each one's milliseconds (the
    cache's None without a cache); with ``MEMORY["CACHE_REPLICAS"]``, ``cache_replicas`` says
    whether this process's last update reached its replicas. Never raises."""
    started = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database: Literal["ok", "down"] = "ok"
    except DatabaseError:
        database = "down"
        # NOTE: drop the broken connection so that the next request reconnects by itself.
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
    if conf.CACHE_REPLICAS and state != "disabled":
        # What this process's last replicated update found, not a probe of its own.
        health["cache_replicas"] = cache.replicas_state()
    return health


ahealth_get = aio.twin(health_get)
