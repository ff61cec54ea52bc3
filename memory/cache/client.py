"""The Redis connection of the memory alias, the one failure boundary, and the circuit breaker.

Every Redis call of the app goes through ``redis_call``: it tells an outage (a connection
error, a timeout, a server that is loading or read-only) from a bug (any other error, such as
``WRONGTYPE`` or a script error), keeps the breaker and the counters, and never raises.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.core.cache import caches
from django_redis.exceptions import ConnectionInterrupted
from redis import asyncio as aioredis
from redis import connection as sync_connection
from redis import exceptions as redis_errors
from redis.asyncio import connection as async_connection
from redis.exceptions import RedisClusterException, SlotNotCoveredError

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
# The longest a write waits, in all, for other callers' probes of a Redis that was down (a
# probe takes one connect and one socket timeout at most); then its update is left to repair.
PROBE_WAIT_SECONDS = 0.5
# Counters go to Redis at most this often, in a call of their own.
COUNTS_FLUSH_SECONDS = 1.0
# The same Redis error of the same call is logged at most this often, with a count.
BUG_LOG_SECONDS = 10.0


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


@dataclass(frozen=True)
class Pass:
    """Leave to call Redis; ``probe`` is set when this caller is the half-open probe."""

    probe: threading.Event | None = None


_GO = Pass()


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
            self.bugs_logged: dict[tuple[str, str], tuple[float, int]] = {}
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

    def admit(self, *, write: bool) -> Pass | threading.Event | None:
        """Whether a call may go to Redis now.

        A ``Pass``: go (the breaker is closed, or this caller is the probe). ``None``: skip (a
        read while open, or while another caller probes). An ``Event``: a write should wait
        for that probe, then ask again. A probe's ``Pass`` must end in ``succeeded``,
        ``failed``, ``bug`` or ``release``: ``Attempt`` sees to it.
        """
        if self.down_since is None:
            return _GO
        with self.lock:
            if self.down_since is None:
                return _GO
            if self.probe is not None:
                return self.probe if write else None
            if not write and time.monotonic() < self.retry_at:
                return None
            self.probe = threading.Event()
            return Pass(self.probe)

    def release(self, ticket: Pass) -> None:
        """Give back a probe whose call ended without an answer or a Redis error (cancelled,
        interrupted): the next caller probes instead, and waiting writers ask again."""
        if ticket.probe is None:
            return
        with self.lock:
            if self.probe is ticket.probe:
                self.probe = None
        ticket.probe.set()

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
        now = time.monotonic()
        kind = (action, str(error).split(" ", 1)[0])
        with self.lock:
            self.bugs += 1
            logged_at, repeats = self.bugs_logged.get(kind, (0.0, 0))
            due = not logged_at or now - logged_at >= BUG_LOG_SECONDS
            self.bugs_logged[kind] = (now, 0) if due else (logged_at, repeats + 1)
        # NOTE: Redis answered, if with an error: that ends an outage as any answer does.
        self.succeeded()
        if not due:
            return
        # NOTE: a persistent error (WRONGTYPE on a key, NOPERM under an ACL) recurs on every
        # retry: one line per kind and interval, with how often it recurred meanwhile.
        again = f" ({repeats} more since the last report)" if repeats else ""
        logger.error("Redis refused %s: %s (a bug, not an outage)%s.", action, error, again)

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


class Attempt:
    """One call to Redis and the breaker's bookkeeping for it, however it ends.

    ``with Attempt(action, ticket) as attempt:`` around the call (sync or awaited): an answer
    closes the breaker; an outage error opens it and a Redis error counts as a bug, both
    swallowed and left in ``attempt.outcome``; anything else (a cancelled task, an interrupt)
    gives the probe back and propagates. The one place that keeps the breaker for a call.
    """

    __slots__ = ("action", "outcome", "ticket")

    def __init__(self, action: str, ticket: Pass) -> None:
        self.action = action
        self.ticket = ticket
        self.outcome: Outcome | None = None

    def __enter__(self) -> Attempt:
        return self

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> bool:
        if error is None:
            breaker.succeeded()
            return False
        if isinstance(error, RedisClusterException):
            # NOTE: not a RedisError: a cluster no known node answers, or a slot no node
            # serves, is down; any other (keys of several slots) is a mistake of the caller.
            cause = error.__cause__
            if isinstance(error, SlotNotCoveredError) or isinstance(cause, DOWN_ERRORS):
                error = redis_errors.ConnectionError(str(error))
            else:
                error = redis_errors.ResponseError(str(error))
        if isinstance(error, DOWN_ERRORS):
            breaker.failed(error, self.action)
            timeout = isinstance(error, redis_errors.TimeoutError)
            self.outcome = Outcome.TIMEOUT if timeout else Outcome.DOWN
            return True
        if isinstance(error, redis_errors.RedisError):
            breaker.bug(error, self.action)
            self.outcome = Outcome.ERROR
            return True
        breaker.release(self.ticket)
        return False


def _admitted(*, write: bool) -> Pass | None:
    """The breaker's leave for a sync call: a write waits for other callers' probes, for at
    most ``PROBE_WAIT_SECONDS`` in all."""
    deadline = 0.0
    while True:
        admitted = breaker.admit(write=write)
        if not isinstance(admitted, threading.Event):
            return admitted
        now = time.monotonic()
        deadline = deadline or now + PROBE_WAIT_SECONDS
        if now >= deadline or not admitted.wait(deadline - now):
            return None


def redis_call(action: str, fn: Callable[[Any], T], *, write: bool = False) -> Answer[T] | Outcome:
    """Run ``fn(client)`` against Redis: its ``Answer``, or the ``Outcome`` that stopped it.

    ``action`` names the call in logs. A write (``write=True``) never skips Redis for the
    breaker; a read does while it is open. Never raises a Redis error.
    """
    if not enabled():
        return Outcome.DISABLED
    ticket = _admitted(write=write)
    if ticket is None:
        return Outcome.SKIPPED
    with Attempt(action, ticket) as attempt:
        value = fn(client())
    return attempt.outcome or Answer(value)


async def aredis_call(action: str, fn: Callable[[Any], Awaitable[T]]) -> Answer[T] | Outcome | None:
    """``redis_call`` for a read from async code, on ``redis.asyncio``: the same breaker and
    the same outcomes; ``None`` where this alias has no async client that matches the sync one
    (the caller reads through the sync path). Never raises a Redis error; a cancellation
    propagates, with the probe given back."""
    if not enabled():
        return Outcome.DISABLED
    redis = async_client()
    if redis is None:
        return None
    ticket = breaker.admit(write=False)
    if not isinstance(ticket, Pass):
        return Outcome.SKIPPED
    with Attempt(action, ticket) as attempt:
        value = await fn(redis)
    return attempt.outcome or Answer(value)


# --- the async client: the sync client's own configuration, on redis.asyncio -----------------

_ASYNC_CONNECTIONS: dict[type, type] = {
    sync_connection.Connection: async_connection.Connection,
    sync_connection.SSLConnection: async_connection.SSLConnection,
    sync_connection.UnixDomainSocketConnection: async_connection.UnixDomainSocketConnection,
}

_ASYNC_POOLS: dict[type, type] = {
    sync_connection.ConnectionPool: async_connection.ConnectionPool,
    sync_connection.BlockingConnectionPool: async_connection.BlockingConnectionPool,
}

# NOTE: what a sync connection holds besides its configuration: its parser, retry policy and
# notification machinery, which redis.asyncio builds for itself. Any other setting the async
# connection does not take means it cannot match the sync one: no async client then.
_SYNC_MACHINERY = frozenset(
    {
        "parser_class",
        "retry",
        "retry_on_error",
        "retry_on_timeout",
        "event_dispatcher",
        "himport_registry",
        "maint_notifications_config",
        "maint_notifications_pool_handler",
        "orig_host_address",
        "orig_socket_timeout",
        "orig_socket_connect_timeout",
        "command_packer",
    }
)


def _async_parameters(cls: type) -> frozenset[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            names.update(inspect.signature(vars(klass)["__init__"]).parameters)
    return frozenset(names - {"self", "args", "kwargs"})


def _async_pool(sync_client: Any) -> Any | None:
    """A ``redis.asyncio`` pool with the connection settings of ``sync_client``'s pool
    (address, database, username and password, TLS, timeouts, ``CONNECTION_POOL_KWARGS``),
    or ``None`` when it has none that redis.asyncio can match (Sentinel, Cluster, a custom
    connection class, a setting only the sync connection knows)."""
    pool = getattr(sync_client, "connection_pool", None)
    pool_class = _ASYNC_POOLS.get(type(pool))
    cls = _ASYNC_CONNECTIONS.get(getattr(pool, "connection_class", None))  # type: ignore[arg-type]
    if pool is None or pool_class is None or cls is None:
        return None
    accepted = _async_parameters(cls)
    kwargs: dict[str, Any] = {}
    for name, value in pool.connection_kwargs.items():
        if name in _SYNC_MACHINERY:
            continue
        if name not in accepted:
            if value is None or value is False:
                continue
            logger.info(
                "Async reads of the memory cache go through the sync client: redis.asyncio "
                "takes no %r.",
                name,
            )
            return None
        kwargs[name] = value
    if isinstance(pool, sync_connection.BlockingConnectionPool):
        kwargs["timeout"] = pool.timeout
    return pool_class(connection_class=cls, max_connections=pool.max_connections, **kwargs)


# NOTE: a redis.asyncio pool belongs to the event loop it was made in: one per loop, made
# again when the sync client's pool is another one (settings changed).
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, Any]] = (
    weakref.WeakKeyDictionary()
)


def async_client() -> Any | None:
    """This event loop's ``redis.asyncio`` client of the memory alias, built from the sync
    client's configuration, or ``None`` where it cannot match it (see ``_async_pool``)."""
    sync_client = client()
    loop = asyncio.get_running_loop()
    made = _async_clients.get(loop)
    pool = getattr(sync_client, "connection_pool", None)
    if made is not None and made[0] is pool:
        return made[1]
    async_pool = _async_pool(sync_client)
    redis = None if async_pool is None else aioredis.Redis(connection_pool=async_pool)
    _async_clients[loop] = (pool, redis)
    return redis


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
