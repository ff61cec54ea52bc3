"""The app's Prometheus counters and gauges, and the hooks the cache layer and the views call
as things happen: the bottom floor, importing nothing of the app. ``memory.metrics`` exposes
them (the scrape and its view).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = [
    "REGISTRY",
    "cache_event",
    "cache_failed",
    "cache_outage_reset",
    "cache_recovered",
    "cache_replicas_behind",
    "embedding_batch",
    "request_observed",
    "throttle_local",
]

# The app's own registry, so that a host's default registry holds nothing it did not ask for.
REGISTRY = CollectorRegistry(auto_describe=True)

CACHE_EVENTS = Counter(
    "memory_cache_events",
    "Events of the cache layer: hits, misses, short (copy holds fewer turns than asked), "
    "rehydrations, fills, fills_refused, deltas (applied), drops (copies dropped), "
    "reconcile_drops (dropped by the repairer's sweep), unreplicated (updates too few replicas "
    "acknowledged), history_unconfirmed, fills_unconfirmed (no database history confirmed), "
    "replica_served, replica_behind, replica_failed (cold reads the read replica answered, or "
    "sent to the primary).",
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
EMBEDDING_TURNS = Counter(
    "memory_embedding_turns",
    "Turns the embedding runs went past, by outcome: embedded (the embedder ran), duplicate "
    "(the vector of the same text, embedded moments before, reused), skipped (an ack-only turn "
    "such as 'ok' or 'thanks': no vector).",
    ["outcome"],
    registry=REGISTRY,
)
EMBEDDING_LAG_SECONDS = Histogram(
    "memory_embedding_lag_seconds",
    "How far behind the appends the embedding runs are: for each batch of turns whose vectors "
    "are written, the age of its oldest turn at that moment.",
    buckets=(0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0),
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


# NOTE: as ``_event_counters``: each answer's two children, by (view, method, status).
_request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}


def request_observed(*, view: str, method: str, status: int, seconds: float) -> None:
    """Record one answer of the API; methods other than HTTP's usual ones count as "other"."""
    method = method if method in _METHODS else "other"
    children = _request_children.get((view, method, status))
    if children is None:
        children = _request_children.setdefault(
            (view, method, status),
            (
                REQUEST_SECONDS.labels(view=view, method=method),
                RESPONSES.labels(view=view, method=method, status=str(status)),
            ),
        )
    children[0].observe(seconds)
    children[1].inc()


def embedding_batch(*, embedded: int, duplicate: int, skipped: int, lag_seconds: float) -> None:
    """An embedding run wrote a batch: how its turns went, and its oldest turn's age."""
    for outcome, n in (("embedded", embedded), ("duplicate", duplicate), ("skipped", skipped)):
        if n:
            EMBEDDING_TURNS.labels(outcome=outcome).inc(n)
    EMBEDDING_LAG_SECONDS.observe(max(0.0, lag_seconds))
