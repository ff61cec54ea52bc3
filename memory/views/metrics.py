"""The Prometheus scrape of the memory app: ``metrics_view``, which the host mounts (the demo at
``/metrics``). Counters live in ``memory.counters``; the one scrape-time value, the dirty-owner
gauge, is a bounded database query (docs/metrics.md)."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from memory.conf import conf
from memory.counters import REGISTRY
from memory.exceptions import MemoryUnavailable
from memory.permissions import is_service_caller

logger = logging.getLogger("memory.metrics")


# Most dirty owners the scrape-time query counts; the gauge then reads "at least this many".
DIRTY_OWNERS_LIMIT = 10_000


class _ProcessMetrics(Collector):
    """This process's metrics, as the app's registry holds them."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


class _DatabaseMetrics(Collector):
    """Values read from the database when scraped: the owners whose cache update is pending."""

    def collect(self) -> Iterator[Metric]:
        from memory.selectors.owners import owner_dirty_count

        try:
            dirty = owner_dirty_count(limit=DIRTY_OWNERS_LIMIT)
        except (MemoryUnavailable, DatabaseError) as e:
            # NOTE: a scrape during a database outage still shows the process's metrics;
            # this gauge is missing, which alerting on absent() can catch.
            logger.warning("Could not count the owners with pending cache updates: %s", e)
            return
        yield GaugeMetricFamily(
            "memory_dirty_owners",
            "Owners whose last cache update has not been confirmed by Redis, "
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
