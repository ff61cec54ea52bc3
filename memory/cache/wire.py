"""Commands on the wire: a read's commands sent in one write on a pooled connection and their
replies read, sync and on redis.asyncio, without a pipeline's objects; an event loop's async
connections and the watch that keeps their calls' deadlines. Callers bring the failure boundary
(``client.redis_call``, ``client.aredis_call``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from redis import BlockingConnectionPool, Redis
from redis import exceptions as redis_errors
from redis._parsers import resp2, resp3
from redis._parsers.socket import SERVER_CLOSED_CONNECTION_ERROR
from redis.asyncio import connection as async_connection
from redis.commands.core import Script

from memory.db import socket_quiet

# A command: its one-word name, then its arguments (bytes go as they are).
Command = tuple[Any, ...]


def commands_run(redis: Any, commands: Sequence[Command]) -> list[Any]:
    """Run ``commands`` in one round trip: their replies as redis-py parses them (no response
    callbacks), or the first ``ResponseError`` once every reply is read. Raises what redis-py
    raises, after the retries of the client's ``Retry``, as a pipeline does. On a cluster,
    sent to the node of the first command's key, else through the cluster's pipeline.
    """
    if not isinstance(redis, Redis):
        node = _slot_node(redis, commands[0])
        rerouted.seen = True
        if node is not None:
            # NOTE: straight to the node serving the key's slot, on the plain client's wire:
            # the cluster's pipeline cost a warm read half again its time on one Redis.
            try:
                replies = commands_run(node, commands)
                rerouted.seen = False
                return replies
            except _REROUTED:
                map_behind(redis)  # not run there: the pipeline below follows the move
            except (redis_errors.ConnectionError, redis_errors.TimeoutError):
                map_behind(redis)
                raise
        pipe = redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return list(pipe.execute())
    pool = redis.connection_pool
    connection = _connection_get(pool, commands)
    in_step = False
    try:
        packed = _packed(connection.encoder.encode, commands)
        answered: list[Any] = connection.retry.call_with_retry(
            lambda: _exchange(connection, packed, len(commands)),
            lambda _error: connection.disconnect(),
        )
        in_step = True
        return answered
    except redis_errors.ResponseError:
        in_step = True  # raised by _in_step, every reply read
        raise
    finally:
        _lease_give_back(pool, connection, in_step=in_step)


# Leases: a thread's connection of a sync pool, kept checked out of it between the thread's calls.
# NOTE: the pool's check-out and return (its lock, fork check, bookkeeping and a probe of the
# socket in three system calls) were a tenth of an append. A kept connection is checked before
# use by one poll of its socket; anything waiting there (an end, a message) sends it through
# the pool's own check, which connects it again. A call that ends out of step (an error, an
# interrupt) gives its connection back to the pool instead. At most half of a pool's limit is
# kept, none of a blocking pool (its waiters would wait on them); a pool that runs out takes
# back the kept connections idle at that moment, so that as many threads call at once as
# before; a thread's end gives its connection back; a forked child forgets its parent's.


class _Slot:
    """The connection a thread keeps (``None`` while in use or taken back) and its pool."""

    __slots__ = ("connection", "fork", "pool")

    def __init__(self) -> None:
        self.pool: Any = None
        self.connection: Any = None
        self.fork = 0


class _Keeper:
    """Held by the thread alone: its end gives the slot's connection back (a finalizer)."""

    __slots__ = ("__weakref__",)


class _Leases(threading.local):
    def __init__(self) -> None:
        self.slot = _Slot()
        self.keeper = _Keeper()
        end = weakref.finalize(self.keeper, _slot_end, self.slot)
        end.atexit = False  # type: ignore[misc]  # an attribute finalize documents


# Guards every slot's connection (another thread may take it back) and the slots of each pool.
_lock = threading.RLock()
_kept: weakref.WeakKeyDictionary[Any, set[_Slot]] = weakref.WeakKeyDictionary()
_POOL_FULL = getattr(redis_errors, "MaxConnectionsError", redis_errors.ConnectionError)


class _Forks:
    """How many times this process was forked into (a lease of another count is the parent's)."""

    count = 0


def _forked() -> None:
    _Forks.count += 1
    _kept.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _connection_get(pool: Any, commands: Sequence[Command]) -> Any:
    """The thread's kept connection of ``pool``, checked, else one of the pool's."""
    connection = _lease_take(pool)
    if connection is not None:
        return connection
    try:
        return pool.get_connection(*_command_name(pool, commands))
    except _POOL_FULL as e:
        if "Too many connections" not in str(e) or not _idle_taken_back(pool):
            raise
    return pool.get_connection(*_command_name(pool, commands))


def _lease_take(pool: Any) -> Any:
    slot = _leases.slot
    if slot.pool is not pool or slot.fork != _Forks.count:
        if slot.pool is not None:
            _slot_end(slot)
        return None
    with _lock:
        connection, slot.connection = slot.connection, None
    if connection is None:
        return None
    try:
        if not _idle_clean(connection):
            pool.ensure_connection(connection)
    except BaseException:
        _slot_end(slot)
        pool.release(connection)
        raise
    return connection


def _lease_give_back(pool: Any, connection: Any, *, in_step: bool) -> None:
    slot = _leases.slot
    if in_step and (slot.pool is pool or _lease_begin(slot, pool)):
        # NOTE: only this thread changes the slot's pool; another may have taken its connection.
        with _lock:
            if slot.connection is None:
                slot.connection = connection
                return
    pool.release(connection)


def _lease_begin(slot: _Slot, pool: Any) -> bool:
    """Count ``slot``'s thread among those keeping a connection of ``pool``, if its limit allows."""
    if slot.pool is not None or isinstance(pool, BlockingConnectionPool):
        return False
    with _lock:
        slots = _kept.setdefault(pool, set())
        if len(slots) >= getattr(pool, "max_connections", 0) // 2:
            return False
        slots.add(slot)
        slot.pool, slot.fork = pool, _Forks.count
    return True


def _slot_end(slot: _Slot) -> None:
    """End the slot's lease: its connection back to its pool (unless a parent's)."""
    with _lock:
        pool, connection, fork = slot.pool, slot.connection, slot.fork
        slot.pool = slot.connection = None
        if pool is None or fork != _Forks.count:
            return
        _kept.get(pool, set()).discard(slot)
    if connection is not None:
        pool.release(connection)


def _idle_taken_back(pool: Any) -> int:
    """Give ``pool`` back every connection its threads keep idle now; how many."""
    with _lock:
        idle = [slot for slot in _kept.get(pool, ()) if slot.connection is not None]
        connections = [slot.connection for slot in idle]
        for slot in idle:
            slot.connection = None
    for connection in connections:
        pool.release(connection)
    return len(connections)


def _idle_clean(connection: Any) -> bool:
    """Whether a kept connection is connected with nothing waiting on its socket (one poll)."""
    sock = getattr(connection, "_sock", None)
    return sock is not None and socket_quiet(sock)


_leases = _Leases()


class _Rerouted(threading.local):
    """Whether this thread's last cluster call ran elsewhere than its key's node by the slot
    map (a copy named by that node's run is not to be trusted: ``runs.key_kept``)."""

    seen = False


rerouted = _Rerouted()


# Replies of a cluster node to a command it did not run, its slot being served elsewhere
# (or nowhere) now: the client's slot map is behind.
_REROUTED = (
    redis_errors.MovedError,
    redis_errors.AskError,
    redis_errors.TryAgainError,
    redis_errors.ClusterDownError,
    redis_errors.MasterDownError,
    redis_errors.ReadOnlyError,
)


def _slot_node(cluster: Any, command: Command) -> Any:
    """The plain client of the cluster node serving ``command``'s key by the cluster's slot
    map, or ``None`` (no key, no such map, a slot no node serves)."""
    manager = getattr(cluster, "nodes_manager", None)
    if manager is None:
        return None
    if command[0] in ("EVALSHA", "EVAL"):
        key = command[3] if len(command) > 3 and command[2] else None
    else:
        key = command[1] if len(command) > 1 else None
    if key is None:
        return None
    try:
        return cluster.get_redis_connection(manager.get_node_from_slot(cluster.keyslot(key)))
    except Exception:  # a slot no node serves (mid-failover): the cluster's routing decides
        return None


def map_behind(cluster: Any) -> None:
    """Have a cluster client rebuild its slot map, in the background (it asks every node)."""
    refresh = getattr(cluster, "refresh_later", None)
    if refresh is not None:
        refresh()


def script_run(script: Script, redis: Any, keys: list[str], args: list[Any]) -> Any:
    """Run ``script`` on the client ``redis`` by EVALSHA in one write (``commands_run``), loading
    it on NOSCRIPT. Not ``Script.__call__``, whose checks cost about 5 us a call.
    """
    command = ("EVALSHA", script.sha, len(keys), *keys, *args)
    try:
        return commands_run(redis, [command])[0]
    except redis_errors.NoScriptError:
        redis.script_load(script.script)
        return commands_run(redis, [command])[0]


def _command_name(pool: Any, commands: Sequence[Command]) -> tuple[str, ...]:
    """What ``pool.get_connection`` takes: the first command's name before redis-py 5.3, which
    requires it, else nothing (later ones warn when it is given)."""
    return (commands[0][0],) if _names_command(type(pool).get_connection) else ()


@functools.cache
def _names_command(get_connection: Callable[..., Any]) -> bool:
    parameter = inspect.signature(get_connection).parameters.get("command_name")
    return parameter is not None and parameter.default is inspect.Parameter.empty


def _packed(encode: Callable[[Any], bytes], commands: Sequence[Command]) -> bytes:
    """``commands`` in the Redis protocol, each an array of bulk strings, the arguments encoded
    as the connection encodes them (``pack_commands`` took a tenth of a warm read).
    """
    parts: list[bytes] = []
    for command in commands:
        parts.append(b"*%d\r\n" % len(command))
        for argument in command:
            kind = type(argument)
            # NOTE: an int as redis-py's encoder writes it (``repr``), without its type checks.
            data = (
                argument if kind is bytes else b"%d" % argument if kind is int else encode(argument)
            )
            parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


def _exchange(connection: Any, packed: bytes, n: int) -> list[Any]:
    connection.send_packed_command([packed])
    return _in_step([_reply(connection) for _ in range(n)])


def _reply(connection: Any) -> Any:
    try:
        return connection.read_response()
    except redis_errors.ResponseError as e:
        return e


def _in_step(replies: list[Any]) -> list[Any]:
    """``replies``, or the first ``ResponseError`` among them, raised once every one was read
    (the pooled connection stays in step)."""
    for reply in replies:
        if isinstance(reply, redis_errors.ResponseError):
            raise reply
    return replies


async def acommands_run(connections: AsyncConnections, commands: Sequence[Command]) -> list[Any]:
    """``commands_run`` on an event loop's connections."""
    connection = await connections.take(commands)
    in_step = False
    try:
        packed = _packed(connection.encoder.encode, commands)
        replies: list[Any] = await connection.retry.call_with_retry(
            lambda: _aexchange(connection, packed, len(commands)),
            lambda _error: connection.disconnect(),
        )
        in_step = True
        return replies
    except redis_errors.ResponseError:
        in_step = True  # every reply was read
        raise
    finally:
        await connections.give_back(connection, in_step=in_step)


async def _aexchange(connection: Any, packed: bytes, n: int) -> list[Any]:
    writer, reader = connection._writer, connection._reader
    if (
        writer is None
        or reader is None
        or type(connection._parser) not in _OUR_PARSES
        or connection._parser._buffer
        or connection.encoder.decode_responses
        or connection.health_check_interval
    ):
        await connection.send_packed_command([packed])
        return _in_step([await _areply(connection) for _ in range(n)])
    # NOTE: the replies parsed here, from the bytes as they arrive: redis-py's parser awaited a
    # line and a value for each element, and a timeout for each reply, half an async warm read.
    # The call's own deadline is the loop's watch (``Watch``).
    try:
        if writer.transport.is_closing():
            raise redis_errors.ConnectionError("Connection closed by the server before write")
        writer.write(packed)
        await writer.drain()
        replies = await replies_read(reader, n, connection._parser.parse_error)
    except BaseException as e:
        # NOTE: as redis-py's read: a connection an error left out of step is closed.
        await connection.disconnect(nowait=True)
        if isinstance(e, OSError) and not isinstance(e, redis_errors.RedisError):
            raise redis_errors.ConnectionError(f"Error while talking to Redis: {e!r}") from e
        raise
    return _in_step(replies)


# The pure-Python parsers, whose only state between replies is the buffer tested empty above.
_OUR_PARSES = (resp2._AsyncRESP2Parser, resp3._AsyncRESP3Parser)


class _Short(Exception):
    """The buffer ends inside a reply: ``need`` bytes at least make it whole (0: unknown)."""

    def __init__(self, need: int) -> None:
        self.need = need


_PUSH = object()


async def replies_read(
    reader: asyncio.StreamReader, n: int, parse_error: Callable[[str], Exception]
) -> list[Any]:
    """The next ``n`` replies of ``reader`` (RESP2 or RESP3), as redis-py's parsers give them
    without decoding: bulk and simple strings as bytes, an error reply as ``parse_error``'s
    exception (raised if a ``ConnectionError``), pushes skipped. Raises redis-py's
    ``ConnectionError`` when the stream ends first, ``InvalidResponse`` for bytes that are no
    reply (a map keyed by a list too) or that follow the last one."""
    # NOTE: no reply is parsed from no bytes: the first read comes first.
    buffer, need = b"", 1 if n else 0
    while True:
        if len(buffer) >= need:
            try:
                replies: list[Any] = []
                at = 0
                while len(replies) < n:
                    value, at = _value(buffer, at, parse_error)
                    if value is not _PUSH:
                        replies.append(value)
            except _Short as short:
                need = short.need
            except (ValueError, IndexError, TypeError) as e:
                raise redis_errors.InvalidResponse(f"Protocol error: {e}") from e
            else:
                if at != len(buffer):
                    raise redis_errors.InvalidResponse("Protocol error: bytes after the replies")
                return replies
        # NOTE: at least as much again as held: a long reply is parsed anew a few times only.
        chunk = await reader.read(max(65536, len(buffer), need - len(buffer)))
        if not chunk:
            raise redis_errors.ConnectionError(SERVER_CLOSED_CONNECTION_ERROR)
        buffer += chunk


def _value(buffer: bytes, at: int, parse_error: Callable[[str], Exception]) -> tuple[Any, int]:
    """The reply that begins at ``at`` and where the next begins; ``_PUSH`` for a push."""
    end = buffer.find(b"\r\n", at)
    if end < 0:
        raise _Short(0)
    kind, line, at = buffer[at], buffer[at + 1 : end], end + 2
    if kind in _BLOBS:  # $ = !
        size = int(line)
        if size < 0:
            return None, at
        stop = at + size
        if len(buffer) < stop + 2:
            raise _Short(stop + 2)
        blob = buffer[at:stop]
        if kind == 61:  # = verbatim: its format first
            return blob[4:], stop + 2
        if kind == 33:  # ! blob error
            return _error(blob, parse_error), stop + 2
        return blob, stop + 2
    if kind in _LISTS:  # * ~ >
        count = int(line)
        if count < 0:
            return None, at
        items = []
        for _ in range(count):
            item, at = _value(buffer, at, parse_error)
            items.append(item)
        return (_PUSH if kind == 62 else items), at
    if kind == 58 or kind == 40:  # : (
        return int(line), at
    if kind == 43:  # +
        return line, at
    if kind == 45:  # -
        return _error(line, parse_error), at
    if kind == 95:  # _
        return None, at
    if kind == 44:  # ,
        return float(line), at
    if kind == 35:  # #
        return line == b"t", at
    if kind == 37:  # % map
        mapping = {}
        for _ in range(int(line)):
            key, at = _value(buffer, at, parse_error)
            mapping[key], at = _value(buffer, at, parse_error)
        return mapping, at
    raise ValueError(f"no reply begins with {bytes([kind])!r}")


_BLOBS = frozenset(b"$=!")
_LISTS = frozenset(b"*~>")


def _error(text: bytes, parse_error: Callable[[str], Exception]) -> Exception:
    error = parse_error(text.decode("utf-8", errors="replace"))
    if isinstance(error, redis_errors.ConnectionError):
        raise error
    return error


async def _areply(connection: Any) -> Any:
    try:
        return await connection.read_response()
    except redis_errors.ResponseError as e:
        return e


class AsyncConnections:
    """An event loop's ``redis.asyncio`` connections to the alias: the pool they come from, the
    ones kept out of it between calls, and the seconds one call may take in all."""

    def __init__(self, pool: Any, deadline: float | None) -> None:
        self.pool = pool
        self.deadline = deadline
        # NOTE: a connection that ends a call in step waits here, still checked out of the pool:
        # the pool's check-out and return (a lock, its bookkeeping) were a tenth of an async
        # read. Never more than the most calls at once, which the pool's limit still counts;
        # none from a blocking pool, whose waiters would wait on them.
        self.idle: list[Any] = []
        blocking = isinstance(pool, async_connection.BlockingConnectionPool)
        # The pool's own check of a connection before use; ``None``: keep none.
        self.check = None if blocking else getattr(pool, "ensure_connection", None)
        self.watch = Watch(asyncio.get_running_loop())

    async def take(self, commands: Sequence[Command]) -> Any:
        """A connected connection in step for ``commands`` (one the server closed is connected
        again)."""
        if self.idle and self.check is not None:
            connection = self.idle.pop()
            try:
                await self.check(connection)
            except BaseException:
                await self.pool.release(connection)
                raise
            return connection
        return await self.pool.get_connection(*_command_name(self.pool, commands))

    async def give_back(self, connection: Any, *, in_step: bool) -> None:
        if in_step and self.check is not None:
            self.idle.append(connection)
        else:
            await self.pool.release(connection)


class Watch:
    """The deadlines of an event loop's Redis calls in flight, kept by one timer at a time: a
    call past its deadline has its task cancelled (``_bounded`` makes that the timeout).
    Not ``asyncio.timeout``: one timer per call cost a twentieth of an async warm read.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.deadlines: dict[asyncio.Task[Any], float] = {}
        self.expired: set[asyncio.Task[Any]] = set()
        self.timer: asyncio.TimerHandle | None = None

    def start(self, task: asyncio.Task[Any], seconds: float) -> None:
        deadline = self.loop.time() + seconds
        self.deadlines[task] = deadline
        if self.timer is None:
            self.timer = self.loop.call_at(deadline, self._check)

    def end(self, task: asyncio.Task[Any]) -> bool:
        """Forget the task's call; whether the watch cancelled it (once)."""
        self.deadlines.pop(task, None)
        if task in self.expired:
            self.expired.discard(task)
            return True
        return False

    def _check(self) -> None:
        self.timer = None
        now, later = self.loop.time(), []
        for task, deadline in list(self.deadlines.items()):
            if deadline > now:
                later.append(deadline)
            elif task not in self.expired:
                self.expired.add(task)
                task.cancel()
        if later:
            self.timer = self.loop.call_at(min(later), self._check)
