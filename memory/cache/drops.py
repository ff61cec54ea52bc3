"""Connections to Redis that connect again: the server dropped them (a restart, perhaps from an
older snapshot) or a call failed on them. redis-py reconnects them silently, so a process with
no call in flight while Redis was away would never see it down; ``watch`` reports them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The attribute of a connection that connected once already.
_SEEN = "_memory_connected_before"
# The attribute of a pool whose connections are watched: its ``_Watch``.
_WATCH = "_memory_drops_watch"


class _Watch:
    """A pool's connect callback (redis-py keeps it as a weak method: the pool holds it)."""

    __slots__ = ("__weakref__", "on_drop")

    def __init__(self, on_drop: Callable[[], None]) -> None:
        self.on_drop = on_drop

    def connected(self, connection: Any) -> None:
        if getattr(connection, _SEEN, False):
            self.on_drop()
        else:
            setattr(connection, _SEEN, True)


def watch(pool: Any, on_drop: Callable[[], None]) -> None:
    """Call ``on_drop`` each time a connection of ``pool`` (sync or redis.asyncio) that was
    connected before connects again; once per pool."""
    if getattr(pool, _WATCH, None) is not None or not hasattr(pool, "make_connection"):
        return
    watcher = _Watch(on_drop)
    setattr(pool, _WATCH, watcher)
    make = pool.make_connection

    def make_connection(*args: Any, **kwargs: Any) -> Any:
        connection = make(*args, **kwargs)
        connection.register_connect_callback(watcher.connected)
        return connection

    pool.make_connection = make_connection
    # NOTE: the connections made before: the available, the checked out, a blocking pool's all.
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
