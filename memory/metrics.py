"""Prometheus metrics of the memory app, where a host site finds them: ``metrics_view`` (the
scrape, ``memory.views.metrics``; the counters are ``memory.counters``'s). docs/metrics.md lists
the metrics, the queries to graph, and how several worker processes are exposed."""

from __future__ import annotations

from memory.views.metrics import CanReadMetrics, MetricsView, metrics_view

__all__ = ["CanReadMetrics", "MetricsView", "metrics_view"]
