"""Prometheus metrics of the memory app, where a host site finds them: ``metrics_view`` (the
scrape, ``memory.views.metrics``) and the counters (``memory.counters``). docs/metrics.md lists
the metrics, the queries to graph, and how several worker processes are exposed."""

from __future__ import annotations

from memory.counters import (
    REGISTRY,
    cache_event,
    cache_failed,
    cache_outage_reset,
    cache_recovered,
    request_observed,
)
from memory.views.metrics import (
    DIRTY_OWNERS_LIMIT,
    CanReadMetrics,
    MetricsView,
    metrics_view,
    registry_for_scrape,
)

__all__ = [
    "DIRTY_OWNERS_LIMIT",
    "REGISTRY",
    "CanReadMetrics",
    "MetricsView",
    "cache_event",
    "cache_failed",
    "cache_outage_reset",
    "cache_recovered",
    "metrics_view",
    "registry_for_scrape",
    "request_observed",
]
