"""Connections to Redis that connect: the run of the server they reach (``runs``), and the
ones that connected before (a drop: ``breaker.dropped``)."""

# NOTE: every connect asks ``INFO server`` for the run_id, which a restart or a failover to
# another server changes. redis-py reconnects silently, so without this a process with no call
# in flight while Redis was away would never see it.

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from redis import exceptions as redis_errors

logger = logging.getLogger("memory.cache")

# The attribute of a connection that connected once already.
_SEEN = "_memory_connected_before"
# The attribute of a pool whose connections are watched: its ``_Watch``.
_WATCH = "_memory_drops_watch"
# Characters of the server's run_id that name copies: 48 bits.
RUN_CHARS = 12
# The run of a server that does not tell it (INFO refused by its ACL): copies are not named by
# it, and only the drops count.
UNNAMED = ""


class _Run:
    """A server's run as its pools last saw it (``None``: not yet)."""

    __slots__ = ("lock", "token")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.token: str | None = None

    def seen(self, token: str) -> bool:
        """Record a run found; whether it differs from the one known."""
        with self.lock:
            changed = self.token is not None and self.token != token
            self.token = token
        if changed:
            logger.warning(
                "The cache's Redis server is another run (a restart or a failover): every copy "
                "stored before it is refused from now on."
            )
        return changed


def run_of(pool: Any) -> _Run | None:
    """The run of a watched pool's server (``None``: not watched)."""
    watcher = getattr(pool, _WATCH, None)
    return None if watcher is None else watcher.run


def run_asked(plain: Any, run: _Run) -> str:
    """Ask the server of the plain client ``plain`` its run (``INFO``) and record it in ``run``:
    the run, ``UNNAMED`` when refused. Raises what redis-py raises for an outage."""
    try:
        token = run_parsed(plain.execute_command("INFO", "server"))
    except redis_errors.ResponseError as e:
        token = _refused(e)
    run.seen(token)
    return token


def node_learned(node: Any, on_drop: Callable[[], None]) -> None:
    """Watch a cluster node's plain client and, while its run is unknown, ask it (``INFO``)."""
    pool = node.connection_pool
    if run_of(pool) is None:
        watch(pool, on_drop)
    run = run_of(pool)
    if run is not None and run.token is None:
        run_asked(node, run)


def run_parsed(info: Any) -> str:
    """The run in an ``INFO server`` reply (text, bytes or a dict)."""
    if isinstance(info, dict):
        found = str(info.get("run_id", ""))
    else:
        text = info.decode() if isinstance(info, bytes) else str(info)
        found = next(
            (line[7:].strip() for line in text.splitlines() if line.startswith("run_id:")), ""
        )
    return found[:RUN_CHARS]


def _refused(error: Exception) -> str:
    # NOTE: once per connect at most, and connects are rare: a warning each time is no flood.
    logger.warning("The cache's Redis refused INFO (%s): copies are not named by its run.", error)
    return UNNAMED


class _Watch:
    """A pool's connect callback (redis-py keeps it as a weak method: the pool holds it)."""

    __slots__ = ("__weakref__", "on_drop", "run")

    def __init__(self, on_drop: Callable[[], None], run: _Run) -> None:
        self.on_drop = on_drop
        self.run = run

    def connected(self, connection: Any) -> Any:
        before = getattr(connection, _SEEN, False)
        setattr(connection, _SEEN, True)
        if _is_async(connection):
            return self._aconnected(connection, before)
        try:
            connection.send_command("INFO", "server", check_health=False)
            run = run_parsed(connection.read_response())
        except redis_errors.ResponseError as e:
            run = _refused(e)
        self._found(before, run)
        return None

    async def _aconnected(self, connection: Any, before: bool) -> None:
        try:
            await connection.send_command("INFO", "server", check_health=False)
            run = run_parsed(await connection.read_response())
        except redis_errors.ResponseError as e:
            run = _refused(e)
        self._found(before, run)

    def _found(self, before: bool, run: str) -> None:
        if self.run.seen(run) or before:
            self.on_drop()


def _is_async(connection: Any) -> bool:
    return type(connection).__module__.startswith("redis.asyncio")


def watch(pool: Any, on_drop: Callable[[], None], *, like: Any = None) -> None:
    """Watch ``pool``'s connects, sync or async, once: the run (shared with ``like``'s), and
    ``on_drop`` for a connection connecting again or finding another run."""
    if getattr(pool, _WATCH, None) is not None or not hasattr(pool, "make_connection"):
        return
    watcher = _Watch(on_drop, run_of(like) or _Run())
    setattr(pool, _WATCH, watcher)
    make = pool.make_connection

    def make_connection(*args: Any, **kwargs: Any) -> Any:
        connection = make(*args, **kwargs)
        connection.register_connect_callback(watcher.connected)
        return connection

    pool.make_connection = make_connection
    # NOTE: the connections made before: the available, the checked out, a blocking pool's all.
    # Their run is asked by the first cache call (``runs``), which finds it unknown.
    held = [
        *getattr(pool, "_available_connections", ()),
        *getattr(pool, "_in_use_connections", ()),
        *getattr(pool, "_connections", ()),
    ]
    for connection in held:
        connection.register_connect_callback(watcher.connected)
        if getattr(connection, "_sock", None) is not None or getattr(
            connection, "is_connected", False
        ):
            setattr(connection, _SEEN, True)
