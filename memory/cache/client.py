"""The Redis connection of the memory alias, the one failure boundary, and the circuit breaker.

Every Redis call of the app goes through ``redis_call``: it tells an outage (a connection
error, a timeout, a server that is loading or read-only) from a bug (any other error, such as
``WRONGTYPE`` or a script error), keeps the breaker and the counters, and never raises.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.core.cache import caches
from django_redis.exceptions import ConnectionInterrupted
from redis import exceptions as redis_errors

from memory import metrics
from memory.conf import conf

logger = logging.getLogger("memory.store")

T = TypeVar("T")

# NOTE: what "Redis is down" means. A script error, WRONGTYPE, an unknown command or an
# argument Redis refuses are bugs, never outages: they are logged as errors naming the
# command and do not open the breaker. Loading, read-only (a demoted primary during a Sentinel
# failover) and cluster-down are transient states of a healthy deployment: outages.
DOWN_ERRORS: tuple[type[BaseException], ...] = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.BusyLoadingError,
    redis_errors.ReadOnlyError,
    redis_errors.ClusterDownError,
    redis_errors.TryAgainError,
    redis_errors.MasterDownError,
    # NOTE: a slot moved under a pipeline sent to one cluster node: a failover in progress.
    redis_errors.AskError,
    ConnectionInterrupted,
    OSError,
)

# NOTE: after an outage error, reads skip Redis for this long so that a Redis that hangs costs
# one socket timeout per process and second, not one per request. Writes never skip it.
BREAKER_SECONDS = 1.0
# The longest a write waits for another caller's probe of a Redis that was down.
PROBE_WAIT_SECONDS = 1.0
# Counters go to Redis at most this often, in a call of their own.
COUNTS_FLUSH_SECONDS = 1.0


class Outcome(enum.Enum):
    """How a Redis call ended when it did not answer: skipped, down, or a bug."""

    DISABLED = "disabled"
    SKIPPED = "skipped"
    DOWN = "down"
    # NOTE: down, but after the command may have been sent: a paused Redis runs it later.
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass(frozen=True)
class Answer(Generic[T]):
    """Redis answered ``value``."""

    value: T


class Breaker:
    """Per-process Redis health: outage logging, a circuit breaker with one probe, counters.

    Closed: every call goes to Redis. After an outage error it opens for ``BREAKER_SECONDS``:
    reads skip Redis. Then it is half-open: one caller at a time probes, the other readers keep
    skipping. Writes never skip: while a probe is in flight they wait for it (at most
    ``PROBE_WAIT_SECONDS``), otherwise they are the probe. Any answer from Redis closes it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.listeners: list[Callable[[], None]] = []
        self.reset()

    def reset(self) -> None:
        """Forget past errors and unflushed counters (tests, a forked worker)."""
        with self.lock:
            self.down_since: float | None = None
            self.retry_at = 0.0
            self.last_error_at = 0.0
            self.down_seconds = 0.0
            self.outages = 0
            self.errors = 0
            self.bugs = 0
            self.probe: threading.Event | None = None
            self.counts: dict[str, int] = {}
            self.counts_flushed_at = 0.0
        metrics.cache_outage_reset()

    def expire(self) -> None:
        """End the open window now: the next call probes (tests, operators)."""
        with self.lock:
            self.retry_at = 0.0

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half-open"`` (for metrics and operators)."""
        if self.down_since is None:
            return "closed"
        return "open" if time.monotonic() < self.retry_at else "half-open"

    def admit(self, *, write: bool) -> threading.Event | bool | None:
        """Whether a call may go to Redis now.

        ``True``: go (the breaker is closed, or this caller is the probe). ``False``: skip
        (a read while open, or while another caller probes). An ``Event``: a write should wait
        for that probe, then ask again.
        """
        if self.down_since is None:
            return True
        with self.lock:
            if self.down_since is None:
                return True
            if self.probe is not None:
                return self.probe if write else False
            if not write and time.monotonic() < self.retry_at:
                return False
            self.probe = threading.Event()
            return True

    def succeeded(self) -> None:
        if self.down_since is None:
            return
        with self.lock:
            since, self.down_since = self.down_since, None
            probe, self.probe = self.probe, None
            if since is not None:
                self.down_seconds += time.monotonic() - since
        if probe is not None:
            probe.set()
        if since is not None:
            metrics.cache_recovered()
            logger.warning("Redis reachable again after %.1f s.", time.monotonic() - since)
            for listener in list(self.listeners):
                listener()

    def failed(self, error: BaseException, action: str) -> None:
        now = time.monotonic()
        with self.lock:
            self.errors += 1
            self.last_error_at = now
            self.retry_at = now + BREAKER_SECONDS
            first = self.down_since is None
            if first:
                self.down_since = now
                self.outages += 1
            probe, self.probe = self.probe, None
        if probe is not None:
            probe.set()
        metrics.cache_failed()
        if first:
            logger.warning(
                "Redis unreachable (%s during %s); reading from the database.", error, action
            )
        else:
            logger.debug("Redis still unreachable (%s during %s).", error, action)

    def bug(self, error: BaseException, action: str) -> None:
        with self.lock:
            self.bugs += 1
        # NOTE: Redis answered, if with an error: that ends an outage as any answer does.
        self.succeeded()
        logger.error("Redis refused %s: %s (a bug, not an outage).", action, error)

    def suspect(self) -> bool:
        """Whether this process saw Redis down within ``MEMORY["SUSPECT_WINDOW"]`` seconds."""
        return self.last_error_at > 0 and time.monotonic() - self.last_error_at < (
            conf.SUSPECT_WINDOW
        )

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + n
        metrics.cache_event(name, n)


breaker = Breaker()


def alias() -> str | None:
    """The configured cache alias, or ``None``: no cache."""
    return conf.CACHE_ALIAS


def enabled() -> bool:
    """Whether a cache alias is configured at all."""
    return alias() is not None


def client() -> Any:
    """The redis-py client of the memory alias (a connection pool shared by the process)."""
    name = alias()
    assert name is not None
    return caches[name].client.get_client(write=True)  # type: ignore[attr-defined]


def redis_call(action: str, fn: Callable[[Any], T], *, write: bool = False) -> Answer[T] | Outcome:
    """Run ``fn(client)`` against Redis: its ``Answer``, or the ``Outcome`` that stopped it.

    ``action`` names the call in logs. A write (``write=True``) never skips Redis for the
    breaker; a read does while it is open. Never raises.
    """
    if not enabled():
        return Outcome.DISABLED
    while True:
        admitted = breaker.admit(write=write)
        if admitted is True:
            break
        if admitted is False:
            return Outcome.SKIPPED
        assert isinstance(admitted, threading.Event)
        if not admitted.wait(PROBE_WAIT_SECONDS):
            return Outcome.SKIPPED
    try:
        value = fn(client())
    except DOWN_ERRORS as e:
        breaker.failed(e, action)
        return Outcome.TIMEOUT if isinstance(e, redis_errors.TimeoutError) else Outcome.DOWN
    except redis_errors.RedisError as e:
        breaker.bug(e, action)
        return Outcome.ERROR
    breaker.succeeded()
    return Answer(value)


def stats_key() -> str:
    from memory.cache.keys import prefix

    return f"{prefix()}:stats"


def counts_flush(*, force: bool = False) -> None:
    """Add this process's counters to the shared ones in Redis, at most once a second.

    NOTE: outside the breaker: on a cluster the counters' key is in a slot of its own, maybe on
    a node that is down while the owner's answers; that must not fail a read whose own script
    succeeded, nor open the breaker for every owner. Unflushed counts wait for the next flush.
    """
    now = time.monotonic()
    with breaker.lock:
        if not force and now - breaker.counts_flushed_at < COUNTS_FLUSH_SECONDS:
            return
        counts, breaker.counts = breaker.counts, {}
        breaker.counts_flushed_at = now
    if not counts or not enabled():
        return
    try:
        pipe = client().pipeline(transaction=False)
        for name, n in counts.items():
            pipe.hincrby(stats_key(), name, n)
        pipe.execute()
    except (*DOWN_ERRORS, redis_errors.RedisError) as e:
        with breaker.lock:
            for name, n in counts.items():
                breaker.counts[name] = breaker.counts.get(name, 0) + n
        logger.debug("Could not flush the cache counters: %s", e)
