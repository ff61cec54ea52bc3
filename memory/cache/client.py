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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.conf import settings
from django.core.cache import caches
from django_redis.exceptions import ConnectionInterrupted
from redis import connection as sync_connection
from redis import exceptions as redis_errors
from redis.asyncio import connection as async_connection
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, SlotNotCoveredError

from memory import counters
from memory.cache.drops import watch as watch_drops
from memory.cache.wire import AsyncConnections, Command, acommands_run
from memory.conf import conf

logger = logging.getLogger("memory.cache")

T = TypeVar("T")

# NOTE: "down" means a transient state of a healthy deployment: connection errors, timeouts,
# loading, read-only (a demoted primary), cluster-down. Script errors and refused commands are bugs.
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

# NOTE: reads skip Redis this long after an outage error, so a hanging Redis costs one socket
# timeout per process and second, not one per request. Writes never skip it.
BREAKER_SECONDS = 1.0
# The longest a write waits, in all, for other callers' probes; then its update is left to repair.
PROBE_WAIT_SECONDS = 0.5
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
    """Leave to call Redis (``shard``: the node it goes to, "" for the whole Redis); ``probe`` is
    set when this caller is that shard's half-open probe."""

    probe: threading.Event | None = None
    shard: str = ""


_GO = Pass()


class _Gate:
    """The breaker's state for one shard: a cluster node, or "" for a single Redis."""

    __slots__ = ("down_since", "probe", "retry_at")

    def __init__(self) -> None:
        self.down_since: float | None = None
        self.retry_at = 0.0
        self.probe: threading.Event | None = None


class Breaker:
    """Per-process Redis health: outage logging, a circuit breaker with one probe, counters.

    Closed: every call goes to Redis. An outage error opens it: with a prober thread (the repairer)
    requests skip Redis until that thread finds it back; without one, reads skip Redis for
    ``BREAKER_SECONDS``, then one caller at a time probes and writes wait for that probe (at most
    ``PROBE_WAIT_SECONDS``). Any answer closes it. On a cluster each node has its own gate.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Called when a shard is found down and when Redis answers again (the repairer wakes).
        self.listeners: list[Callable[[], None]] = []
        # NOTE: the thread that probes shards found down (the repairer, which registers itself);
        # without one, requests probe, one at a time.
        self.prober: threading.Thread | None = None
        self.reset()

    def reset(self) -> None:
        """Forget past errors and unflushed counters (tests, a forked worker)."""
        with self.lock:
            self.down_since: float | None = None
            self.gates: dict[str, _Gate] = {}
            self.last_error_at = 0.0
            self.down_seconds = 0.0
            self.outages = 0
            self.errors = 0
            self.bugs = 0
            self.bugs_logged: dict[tuple[str, str], tuple[float, int]] = {}
            self.counts: dict[str, int] = {}
            self.counts_flushed_at = 0.0
        counters.cache_outage_reset()

    def expire(self) -> None:
        """End the open window now: the next call probes (tests, operators)."""
        with self.lock:
            for gate in self.gates.values():
                gate.retry_at = 0.0

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half-open"``: open while any shard's window runs."""
        if self.down_since is None:
            return "closed"
        now = time.monotonic()
        down = [gate for gate in list(self.gates.values()) if gate.down_since is not None]
        if not down:
            return "closed"
        return "open" if any(now < gate.retry_at for gate in down) else "half-open"

    def admit(self, *, write: bool, shard: str = "") -> Pass | threading.Event | None:
        """Whether a call to ``shard`` may go to Redis now.

        A ``Pass``: go. ``None``: skip. An ``Event``: a write waits for that probe, then asks again.
        A probe's ``Pass`` must end in ``succeeded``, ``failed``, ``bug`` or ``release``
        (``Attempt`` sees to it).
        """
        if self.down_since is None:
            return _GO if not shard else Pass(shard=shard)
        with self.lock:
            gate = self.gates.get(shard)
            if gate is None or gate.down_since is None:
                return _GO if not shard else Pass(shard=shard)
            prober = self.prober
            if (
                prober is not None
                and prober.is_alive()
                and threading.current_thread() is not prober
            ):
                # NOTE: the prober thread probes: a request neither waits nor probes; a write leaves
                # its update to the repair.
                return None
            if gate.probe is not None:
                return gate.probe if write else None
            if not write and time.monotonic() < gate.retry_at:
                return None
            gate.probe = threading.Event()
            return Pass(gate.probe, shard)

    def release(self, ticket: Pass) -> None:
        """Give back a probe whose call ended without an answer or a Redis error (cancelled,
        interrupted): the next caller probes instead."""
        if ticket.probe is None:
            return
        with self.lock:
            gate = self.gates.get(ticket.shard)
            if gate is not None and gate.probe is ticket.probe:
                gate.probe = None
        ticket.probe.set()

    def dropped(self) -> None:
        """Redis dropped a connection of this process (``drops``): suspect, as after an error."""
        with self.lock:
            self.last_error_at = time.monotonic()

    def succeeded(self, shard: str = "") -> None:
        if self.down_since is None:
            return
        now = time.monotonic()
        with self.lock:
            probe = None
            gate = self.gates.get(shard)
            if gate is not None and gate.down_since is not None:
                gate.down_since = None
                probe, gate.probe = gate.probe, None
            # NOTE: a node no call has gone to for a window after its own ended (failed over, serves
            # no slot) no longer counts as down.
            for other in self.gates.values():
                if other.probe is None and now - other.retry_at > BREAKER_SECONDS:
                    other.down_since = None
            since: float | None = self.down_since
            if any(other.down_since is not None for other in self.gates.values()):
                since = None
            else:
                self.down_since = None
            if since is not None:
                self.down_seconds += time.monotonic() - since
        if probe is not None:
            probe.set()
        if since is not None:
            counters.cache_recovered()
            logger.warning("Redis reachable again after %.1f s.", time.monotonic() - since)
            for listener in list(self.listeners):
                listener()

    def failed(self, error: BaseException, action: str, shard: str = "") -> None:
        now = time.monotonic()
        with self.lock:
            self.errors += 1
            self.last_error_at = now
            gate = self.gates.get(shard)
            if gate is None:
                gate = self.gates[shard] = _Gate()
            gate.retry_at = now + BREAKER_SECONDS
            opened = gate.down_since is None
            if opened:
                gate.down_since = now
            first = self.down_since is None
            if first:
                self.down_since = now
                self.outages += 1
            probe, gate.probe = gate.probe, None
        if probe is not None:
            probe.set()
        counters.cache_failed()
        where = f"Redis node {shard}" if shard else "Redis"
        if opened:
            for listener in list(self.listeners):
                listener()
            logger.warning(
                "%s unreachable (%s during %s); reading from the database.", where, error, action
            )
        else:
            logger.debug("%s still unreachable (%s during %s).", where, error, action)

    def bug(self, error: BaseException, action: str, shard: str = "") -> None:
        now = time.monotonic()
        kind = (action, str(error).split(" ", 1)[0])
        with self.lock:
            self.bugs += 1
            logged_at, repeats = self.bugs_logged.get(kind, (0.0, 0))
            due = not logged_at or now - logged_at >= BUG_LOG_SECONDS
            self.bugs_logged[kind] = (now, 0) if due else (logged_at, repeats + 1)
        # NOTE: Redis answered, if with an error: that ends an outage as any answer does.
        self.succeeded(shard)
        if not due:
            return
        # NOTE: one line per kind and interval, with a count: a persistent error recurs.
        again = f" ({repeats} more since the last report)" if repeats else ""
        logger.error("Redis refused %s: %s (a bug, not an outage)%s.", action, error, again)

    def down_shards(self) -> list[str]:
        """The shards whose gate is open or half-open."""
        with self.lock:
            return [name for name, gate in self.gates.items() if gate.down_since is not None]

    def is_down(self, shard: str) -> bool:
        """Whether ``shard``'s gate is open or half-open (an outage there)."""
        gate = self.gates.get(shard)
        return gate is not None and gate.down_since is not None

    @property
    def down(self) -> bool:
        """Whether any shard is in an outage."""
        return self.down_since is not None

    def suspect(self) -> bool:
        """Whether this process saw Redis down within ``MEMORY["SUSPECT_WINDOW"]`` seconds."""
        return self.last_error_at > 0 and time.monotonic() - self.last_error_at < (
            conf.SUSPECT_WINDOW
        )

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + n
        counters.cache_event(name, n)


breaker = Breaker()


def alias() -> str | None:
    """The configured cache alias, or ``None``: no cache."""
    return conf.CACHE_ALIAS


def enabled() -> bool:
    """Whether a cache alias is configured at all."""
    return alias() is not None


class _Held(threading.local):
    """This thread's client of the alias last asked for, and the ``CACHES`` it was made under."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.caches: Any = None
        self.client: Any = None


_held = _Held()


def client() -> Any:
    """The redis-py client of the memory alias (one pool per process), kept while the alias's
    entry in CACHES is the same dict."""
    name = alias()
    assert name is not None
    return _client_of(name)


def _client_of(name: str) -> Any:
    held, configured = _held, settings.CACHES
    if held.client is None or held.name != name or held.caches is not configured:
        # NOTE: kept per thread: asgiref's Local cost a warm read more than the rest here.
        held.client = caches[name].client.get_client(write=True)  # type: ignore[attr-defined]
        watch_drops(getattr(held.client, "connection_pool", None), breaker.dropped)
        held.name, held.caches = name, configured
    return held.client


class Attempt:
    """One call to Redis and the breaker's bookkeeping for it, however it ends.

    An answer closes the breaker; an outage error opens it and a Redis error counts as a bug, both
    swallowed and left in ``attempt.outcome``; anything else (a cancellation, an interrupt) gives
    the probe back and propagates.
    """

    __slots__ = ("action", "outcome", "ticket")

    def __init__(self, action: str, ticket: Pass) -> None:
        self.action = action
        self.ticket = ticket
        self.outcome: Outcome | None = None

    def __enter__(self) -> Attempt:
        return self

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> bool:
        shard = self.ticket.shard
        if error is None:
            breaker.succeeded(shard)
            return False
        if isinstance(error, RedisClusterException):
            # NOTE: not a RedisError: a cluster no node answers, or a slot no node serves, is down;
            # any other (keys of several slots) is the caller's mistake.
            cause = error.__cause__
            if isinstance(error, SlotNotCoveredError) or isinstance(cause, DOWN_ERRORS):
                error = redis_errors.ConnectionError(str(error))
            else:
                error = redis_errors.ResponseError(str(error))
        if isinstance(error, DOWN_ERRORS):
            breaker.failed(error, self.action, shard)
            timeout = isinstance(error, redis_errors.TimeoutError)
            self.outcome = Outcome.TIMEOUT if timeout else Outcome.DOWN
            return True
        if isinstance(error, redis_errors.RedisError):
            breaker.bug(error, self.action, shard)
            self.outcome = Outcome.ERROR
            return True
        breaker.release(self.ticket)
        return False


def _admitted(*, write: bool, shard: str) -> Pass | None:
    """The breaker's leave for a sync call: a write waits for other callers' probes, for at
    most ``PROBE_WAIT_SECONDS`` in all."""
    deadline = 0.0
    while True:
        admitted = breaker.admit(write=write, shard=shard)
        if not isinstance(admitted, threading.Event):
            return admitted
        now = time.monotonic()
        deadline = deadline or now + PROBE_WAIT_SECONDS
        if now >= deadline or not admitted.wait(deadline - now):
            return None


def redis_call(
    action: str,
    fn: Callable[[Any], T],
    *,
    write: bool = False,
    key: str | None = None,
    shard: str | None = None,
) -> Answer[T] | Outcome:
    """Run ``fn(client)`` against Redis: its ``Answer``, or the ``Outcome`` that stopped it.

    ``action`` names the call in logs; ``key`` picks the cluster node's gate (``shard`` names it
    outright, for a probe). A write never skips Redis for the breaker; a read does while it is open.
    Never raises a Redis error.
    """
    name = alias()
    if name is None:
        return Outcome.DISABLED
    try:
        redis = _client_of(name)
    except Exception:
        # NOTE: a cluster no seed answers cannot be built: the call below counts the same error.
        redis, shard = None, shard or ""
    else:
        if shard is None:
            shard = _shard(redis, key) if key is not None else ""
    ticket = _admitted(write=write, shard=shard)
    if ticket is None:
        return Outcome.SKIPPED
    with Attempt(action, ticket) as attempt:
        value = fn(redis if redis is not None else client())
    return attempt.outcome or Answer(value)


def shard_for(key: str) -> str:
    """The breaker's shard of ``key``: its cluster node, or "" (a single Redis). Never raises."""
    try:
        return _shard(client(), key) if enabled() else ""
    except Exception:
        return ""


def _shard(redis: Any, key: str) -> str:
    """The cluster node ``key``'s slot is on ("" for a single Redis, or a slot with no node)."""
    if not _cluster_type(type(redis)):
        return ""
    try:
        return str(redis.nodes_manager.get_node_from_slot(redis.keyslot(key)).name)
    except Exception:  # a slot no node serves, mid-failover: the whole cluster's gate
        return ""


# NOTE: by the client's class: an isinstance check against RedisCluster goes through typing's
# protocol machinery, a microsecond a call.
_cluster_types: dict[type, bool] = {}


def _cluster_type(kind: type) -> bool:
    cluster = _cluster_types.get(kind)
    if cluster is None:
        cluster = _cluster_types[kind] = issubclass(kind, RedisCluster)
    return cluster


async def aredis_call(
    action: str, commands: Sequence[Command]
) -> Answer[list[Any]] | Outcome | None:
    """``redis_call`` of ``commands`` (``acommands_run``) for a read from async code, on
    ``redis.asyncio``, with the same breaker and outcomes, bounded in all by the alias's socket
    timeout; ``None`` where the alias has no matching async client. Never raises a Redis error;
    a cancellation propagates, with the probe given back."""
    name = alias()
    if name is None:
        return Outcome.DISABLED
    connections = _async_connections(name)
    if connections is None:
        return None
    ticket = breaker.admit(write=False)
    if not isinstance(ticket, Pass):
        return Outcome.SKIPPED
    with Attempt(action, ticket) as attempt:
        value = await _bounded(connections, commands)
    return attempt.outcome or Answer(value)


async def _bounded(connections: AsyncConnections, commands: Sequence[Command]) -> list[Any]:
    """``acommands_run``, stopped by the loop's watch (``Watch``) once it has run the alias's
    socket timeout: then redis-py's ``TimeoutError``."""
    seconds, watch = connections.deadline, connections.watch
    task = asyncio.current_task()
    if seconds is None or task is None:
        return await acommands_run(connections, commands)
    cancelling = task.cancelling()
    watch.start(task, seconds)
    try:
        return await acommands_run(connections, commands)
    except asyncio.CancelledError as e:
        # NOTE: the watch's own cancellation alone becomes the timeout; any other propagates.
        if watch.end(task) and task.uncancel() <= cancelling:
            raise redis_errors.TimeoutError(f"Redis did not answer within {seconds} s.") from e
        raise
    finally:
        watch.end(task)


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

# NOTE: what a sync connection holds besides its configuration (redis.asyncio builds its own); any
# other setting the async connection does not take means no async client.
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


def _async_pool(sync_client: Any) -> tuple[Any, float | None] | None:
    """A ``redis.asyncio`` pool with the connection settings of ``sync_client``'s pool but its
    socket timeout, and that timeout; ``None`` where redis.asyncio cannot match them (Sentinel,
    Cluster, a custom connection class).
    The timeout bounds each whole call instead (``_within``).
    """
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
    deadline = kwargs.pop("socket_timeout", None)
    made = pool_class(
        connection_class=cls, max_connections=pool.max_connections, socket_timeout=None, **kwargs
    )
    watch_drops(made, breaker.dropped, like=pool)
    return made, deadline


@dataclass(frozen=True)
class _Async:
    """An event loop's connections to one alias (``None``: redis.asyncio cannot match it), made
    for the alias's settings ``params``."""

    params: Any
    connections: AsyncConnections | None


# NOTE: a redis.asyncio pool belongs to its event loop: one per loop and alias, rebuilt when the
# alias's settings change.
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Async]] = (
    weakref.WeakKeyDictionary()
)


def _async_connections(name: str) -> AsyncConnections | None:
    """This event loop's connections to the alias ``name``. They have no socket timeout:
    ``aredis_call`` bounds each call."""
    params = settings.CACHES.get(name)
    per_loop = _async_clients.get(loop := asyncio.get_running_loop())
    if per_loop is None:
        per_loop = _async_clients.setdefault(loop, {})
    made = per_loop.get(name)
    if made is None or made.params is not params:
        matched = _async_pool(_client_of(name))
        made = _Async(params, None if matched is None else AsyncConnections(*matched))
        per_loop[name] = made
    return made.connections
