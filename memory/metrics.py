"""Prometheus metrics of the memory app: the registry, the hooks the cache layer and the views
call, and ``metrics_view``, the exposition the host mounts (the demo at ``/metrics``).

Nothing here talks to Redis: counters are pushed by the cache layer as things happen, and the
one scrape-time value, the dirty-owner gauge, is a bounded database query. docs/metrics.md
lists the metrics, the queries to graph, and how several worker processes are exposed.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from memory.conf import conf
from memory.exceptions import MemoryUnavailable
from memory.permissions import is_service_caller

logger = logging.getLogger("memory.metrics")

__all__ = [
    "REGISTRY",
    "CanReadMetrics",
    "MetricsView",
    "cache_event",
    "cache_failed",
    "cache_outage_reset",
    "cache_recovered",
    "metrics_view",
    "request_observed",
]

# The app's own registry, so that a host's default registry holds nothing it did not ask for.
REGISTRY = CollectorRegistry(auto_describe=True)

# Most dirty owners the scrape-time query counts; the gauge then reads "at least this many".
DIRTY_OWNERS_LIMIT = 10_000

CACHE_EVENTS = Counter(
    "memory_cache_events",
    "Events of the cache layer: hits, misses, short (copy holds fewer turns than asked), "
    "rehydrations, fills, fills_refused, deltas (applied), drops (copies dropped), "
    "reconcile_drops (dropped by the repairer's sweep), unreplicated (updates too few replicas "
    "acknowledged).",
    ["event"],
    registry=REGISTRY,
)
CACHE_UNREACHABLE = Gauge(
    "memory_cache_unreachable",
    "1 while this process finds Redis unreachable: its breaker skips Redis, retrying once a "
    "second; 0 once Redis answered again.",
    multiprocess_mode="livemax",
    registry=REGISTRY,
)
CACHE_REPLICAS_BEHIND = Gauge(
    "memory_cache_replicas_behind",
    "1 while this process's cache updates reach fewer online replicas than they wait for "
    "(MEMORY['CACHE_REPLICAS']): they count as not landed and are repaired; 0 once an update "
    "reached them all.",
    multiprocess_mode="livemax",
    registry=REGISTRY,
)
THROTTLE_LOCAL = Counter(
    "memory_throttle_local",
    "Rate-limit counts this process made in its own memory because Redis could not be reached "
    "(memory.throttling): the limits then hold per process.",
    registry=REGISTRY,
)
CACHE_OUTAGES = Counter(
    "memory_cache_outages",
    "Redis outages this process went through (first error after a success).",
    registry=REGISTRY,
)
CACHE_DOWN_SECONDS = Counter(
    "memory_cache_down_seconds",
    "Seconds this process spent without Redis, counted at each failed retry and at recovery.",
    registry=REGISTRY,
)
REQUEST_SECONDS = Histogram(
    "memory_request_duration_seconds",
    "Time the memory API took to answer, by view (URL name) and method.",
    ["view", "method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
RESPONSES = Counter(
    "memory_responses",
    "Answers of the memory API by view, method and status code.",
    ["view", "method", "status"],
    registry=REGISTRY,
)


class _Outage:
    """This process's view of a Redis outage, for the down-time counter."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.accounted_at: float | None = None


_outage = _Outage()


# NOTE: the labelled children, looked up once: ``labels()`` takes a lock and builds a tuple,
# half the cost of a count on the warm-read path.
_event_counters: dict[str, Any] = {}


def cache_event(name: str, n: int = 1) -> None:
    """Count ``n`` cache-layer events called ``name`` (the cache layer's counter names)."""
    counter = _event_counters.get(name)
    if counter is None:
        counter = _event_counters.setdefault(name, CACHE_EVENTS.labels(event=name))
    counter.inc(n)


def cache_failed() -> None:
    """Redis failed a call: starts an outage, or adds the time since the last failed call."""
    now = time.monotonic()
    with _outage.lock:
        since, _outage.accounted_at = _outage.accounted_at, now
    if since is None:
        CACHE_OUTAGES.inc()
        CACHE_UNREACHABLE.set(1)
    else:
        CACHE_DOWN_SECONDS.inc(now - since)


def cache_recovered() -> None:
    """Redis answered after an outage: adds its last stretch and clears the gauge."""
    now = time.monotonic()
    with _outage.lock:
        since, _outage.accounted_at = _outage.accounted_at, None
    if since is not None:
        CACHE_DOWN_SECONDS.inc(now - since)
    CACHE_UNREACHABLE.set(0)


def cache_replicas_behind(behind: bool) -> None:
    """Whether this process's last replicated cache update came up short of its replicas."""
    CACHE_REPLICAS_BEHIND.set(1 if behind else 0)


def throttle_local() -> None:
    """A rate-limit count made in the process, Redis away."""
    THROTTLE_LOCAL.inc()


def cache_outage_reset() -> None:
    """Forget an outage in progress without counting it (the cache layer's reset)."""
    with _outage.lock:
        _outage.accounted_at = None
    CACHE_UNREACHABLE.set(0)


# NOTE: a label value per HTTP method a client may invent would let anyone grow the series.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def request_observed(*, view: str, method: str, status: int, seconds: float) -> None:
    """Record one answer of the API; methods other than HTTP's usual ones count as "other"."""
    method = method if method in _METHODS else "other"
    REQUEST_SECONDS.labels(view=view, method=method).observe(seconds)
    RESPONSES.labels(view=view, method=method, status=str(status)).inc()


class _ProcessMetrics(Collector):
    """This process's metrics, as the app's registry holds them."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


class _DatabaseMetrics(Collector):
    """Values read from the database when scraped: the owners whose cache update is pending."""

    def collect(self) -> Iterator[Metric]:
        from memory import selectors

        try:
            dirty = selectors.owner_dirty_count(limit=DIRTY_OWNERS_LIMIT)
        except (MemoryUnavailable, DatabaseError) as e:
            # NOTE: a scrape during a database outage still shows the process's metrics;
            # this gauge is missing, which alerting on absent() can catch.
            logger.warning("Could not count the owners with pending cache updates: %s", e)
            return
        yield GaugeMetricFamily(
            "memory_dirty_owners",
            "Owners whose last cache update has not been confirmed by Redis (the outbox), "
            f"counted up to {DIRTY_OWNERS_LIMIT}.",
            value=dirty,
        )


def registry_for_scrape() -> CollectorRegistry:
    """What one scrape exposes: every worker's metrics in multiprocess mode (when
    ``PROMETHEUS_MULTIPROC_DIR`` is set), else this process's, plus the database gauges."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        registry.register(_ProcessMetrics())
    registry.register(_DatabaseMetrics())
    return registry


def _bearer_token(request: Request) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class CanReadMetrics(BasePermission):
    """Service callers, or a request bearing ``MEMORY["METRICS_TOKEN"]``, read the metrics."""

    def has_permission(self, request: Request, view: Any) -> bool:
        expected = conf.METRICS_TOKEN
        given = _bearer_token(request)
        if expected and given is not None:
            # NOTE: constant time, so that the answer's timing tells nothing of the token.
            return secrets.compare_digest(given.encode(), expected.encode())
        return is_service_caller(request.user)


class MetricsView(APIView):
    """Prometheus text exposition of the app's metrics (``GET`` only)."""

    permission_classes = [CanReadMetrics]

    @extend_schema(exclude=True)
    def get(self, request: Request) -> HttpResponse:
        body = generate_latest(registry_for_scrape())
        response = HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
        response["Cache-Control"] = "no-store"
        return response


metrics_view = MetricsView.as_view()
