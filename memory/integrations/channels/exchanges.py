"""The exchanges of the websocket chat: a message and its reply, run by a task of the process
under the owner's exchange lock, and what they publish to the owner's sockets, here and on the
other instances (docs/websocket.md)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.core.exceptions import ValidationError
from django.db import connections

from memory import selectors, services
from memory.exceptions import IdempotencyKeyReused, MemoryUnavailable
from memory.models import Role
from memory.payloads import ContextPayload, TurnPayload, turn_payload
from memory.selectors.turns import owner_last_seq, turn_by_key_get

logger = logging.getLogger("memory.integrations.channels")

T = TypeVar("T")


class ChatSocket(Protocol):
    """What an exchange needs of a socket (``sockets.MemoryChatMixin``): to hand it frames."""

    def _event(self, frame: dict[str, Any]) -> None: ...

    def _exchange_done(self, message_id: str) -> None: ...


# Close codes: a frame over the size cap (RFC 6455's "message too big"), a binary frame
# ("unsupported data"), and a socket with no owner (not authenticated).
CLOSE_TOO_BIG = 1009
CLOSE_UNSUPPORTED = 1003
CLOSE_NO_OWNER = 4401

# This process, in what it publishes on the channel layer: it has delivered its own events itself.
INSTANCE = uuid.uuid4().hex
# The first key of the Postgres advisory lock that serializes the exchanges of one owner.
LOCK_NAMESPACE = 0x6D656D  # "mem"

# Exchanges running in this process (so none is collected with its socket), and the text so far of
# each reply in production, by owner and the reply's seq (sent first to a client that reconnects).
_exchanges: set[asyncio.Task[None]] = set()
_exchanges_by_owner: dict[str, int] = {}
# The exchange of each (owner, message id) running here: a resend joins it instead of another.
_running: dict[tuple[str, str], Exchange] = {}
_replies: dict[str, dict[int, list[str]]] = {}
# The sockets of this process, by owner.
_sockets: dict[str, weakref.WeakSet[ChatSocket]] = {}
_owner_locks: dict[str, asyncio.Lock] = {}
# Connections held for exchange locks at most (an exchange past it waits); one idle for
# LOCK_CONNECTION_IDLE seconds is closed, as the database's connections are shared.
MAX_LOCK_CONNECTIONS = 12
LOCK_CONNECTION_IDLE = 30.0
_lock_pool_open: Any = None


def group_name(owner_id: str) -> str:
    """The channel layer group of an owner's sockets (a hash: group names may not hold ``@`` or
    ``:``)."""
    return "memory-chat." + hashlib.blake2b(owner_id.encode(), digest_size=16).hexdigest()


def _lock_key(owner_id: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(owner_id.encode(), digest_size=4).digest(), "big", signed=True
    )


async def _db(fn: Callable[..., T], /, **kwargs: Any) -> T:
    """``fn(**kwargs)`` in a worker thread, its connection closed at the end: a socket holds no
    connection between reads."""

    def run() -> T:
        try:
            return fn(**kwargs)
        finally:
            connections.close_all()

    return await sync_to_async(run, thread_sensitive=False)()


@contextlib.asynccontextmanager
async def owner_exchange_lock(owner_id: str, *, timeout: float) -> AsyncIterator[None]:
    """Hold the owner's exchange lock: one exchange of an owner at a time, across every instance.

    On PostgreSQL a transaction-level advisory lock on a pooled connection of its own; elsewhere a
    lock of this process. Raises ``MemoryUnavailable`` when the database cannot be reached or the
    lock is not had within ``timeout`` seconds.
    """
    local = _owner_locks.setdefault(owner_id, asyncio.Lock())
    try:
        async with asyncio.timeout(timeout):
            await local.acquire()
    except TimeoutError as e:
        raise MemoryUnavailable("The owner's exchange lock was not had in time.") from e
    try:
        if connections["default"].vendor != "postgresql":
            yield
            return
        import psycopg

        pool = await _lock_pool()
        try:
            async with pool.connection(timeout=timeout) as conn:
                try:
                    # NOTE: one round trip: the wait's bound for this transaction, then the lock.
                    await conn.execute(
                        "SELECT set_config('lock_timeout', %s, true),"
                        " pg_advisory_xact_lock(%s, %s)",
                        (f"{int(timeout * 1000)}ms", LOCK_NAMESPACE, _lock_key(owner_id)),
                    )
                    yield
                finally:
                    # The lock goes with the transaction; the connection back to the pool.
                    with contextlib.suppress(psycopg.Error):
                        await conn.rollback()
        except (psycopg.Error, OSError) as e:
            raise MemoryUnavailable("The owner's exchange lock was not had.") from e
        except TimeoutError as e:
            # psycopg_pool's PoolTimeout is a psycopg.OperationalError, caught above.
            raise MemoryUnavailable("The owner's exchange lock was not had in time.") from e
    finally:
        local.release()
        if not local.locked() and not getattr(local, "_waiters", None):
            _owner_locks.pop(owner_id, None)


async def _lock_pool() -> Any:
    """This process's pool of connections for exchange locks (``MAX_LOCK_CONNECTIONS`` at most,
    each checked before use: a connection a restarted Postgres dropped is replaced)."""
    global _lock_pool_open
    if _lock_pool_open is None:
        from psycopg_pool import AsyncConnectionPool

        pool = AsyncConnectionPool(
            kwargs=_lock_connection_params(),
            min_size=0,
            max_size=MAX_LOCK_CONNECTIONS,
            max_idle=LOCK_CONNECTION_IDLE,
            open=False,
            check=AsyncConnectionPool.check_connection,
            name="memory-chat-locks",
        )
        await pool.open()
        _lock_pool_open = pool
    return _lock_pool_open


def _lock_connection_params() -> dict[str, Any]:
    """libpq parameters of the default database, for the lock's own async connection."""
    params = connections["default"].get_connection_params()
    dropped = {"context", "cursor_factory", "prepare_threshold", "server_side_binding"}
    return {k: v for k, v in params.items() if k not in dropped} | {"autocommit": False}


# -- publishing: to this process's sockets at once, to the others' through the channel layer --


class _LayerOut:
    """Everything this process publishes on the channel layer, sent in order by one task; while the
    layer does not answer, sends are dropped for ``pause`` seconds (sockets catch up from the
    database)."""

    timeout = 1.0
    pause = 2.0
    size = 10_000

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[str, str, dict[str, Any]]] | None = None
        self.task: asyncio.Task[None] | None = None
        self.down_until = 0.0

    def put(self, kind: str, target: str, message: dict[str, Any]) -> None:
        if get_channel_layer() is None or time.monotonic() < self.down_until:
            return
        if self.queue is None or self.task is None or self.task.done():
            self.queue = asyncio.Queue(self.size)
            self.task = asyncio.get_running_loop().create_task(self._run(self.queue))
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait((kind, target, message))

    async def _run(self, queue: asyncio.Queue[tuple[str, str, dict[str, Any]]]) -> None:
        while True:
            kind, target, message = await queue.get()
            if time.monotonic() < self.down_until:
                continue
            layer = get_channel_layer()
            if layer is None:
                continue
            send = layer.group_send if kind == "group" else layer.send
            try:
                async with asyncio.timeout(self.timeout):
                    await send(target, message)
            except Exception:
                logger.warning("The channel layer did not take a chat event.", exc_info=True)
                self.down_until = time.monotonic() + self.pause


_layer_out = _LayerOut()


def _publish(owner_id: str, frame: dict[str, Any]) -> None:
    """Give ``frame`` (a turn or a delta of the owner) to each socket of the owner, here and on
    the other instances."""
    for socket in list(_sockets.get(owner_id, ())):
        socket._event(frame)
    _layer_out.put(
        "group", group_name(owner_id), {"type": "memory.chat", "origin": INSTANCE, "frame": frame}
    )


def _snapshots(owner_id: str) -> list[dict[str, Any]]:
    """A delta frame (offset 0) with the whole text so far of each reply of the owner that this
    process is producing."""
    return [
        {"type": "delta", "seq": seq, "text": "".join(pieces), "offset": 0}
        for seq, pieces in sorted(_replies.get(owner_id, {}).items())
        if pieces
    ]


# -- one exchange: the message stored, the reply produced, streamed and stored ----------------


async def reply_chunks(
    responder: Any, *, context: ContextPayload, message: str
) -> AsyncIterator[str]:
    """The responder's reply as chunks: its ``astream(context=, message=)`` if it has one, else
    the whole of ``respond(context=, message=)`` (run in a thread) as one chunk."""
    astream = getattr(responder, "astream", None)
    if astream is not None:
        async for chunk in astream(context=context, message=message):
            yield chunk
        return
    yield await sync_to_async(responder.respond, thread_sensitive=False)(
        context=context, message=message
    )


def _append_once(
    *,
    owner_id: str,
    session_id: str,
    role: Role,
    content: str,
    metadata: dict[str, Any],
    key: str,
    resend_must_match: bool,
) -> TurnPayload:
    """A turn of a websocket message, stored once under the idempotency key ``key``: a resend
    returns the turn first stored; with ``resend_must_match``, only when it has the same role and
    content (else ``IdempotencyKeyReused``)."""
    try:
        turn = services.turn_append(
            owner_id=owner_id,
            session_id=session_id,
            role=role.value,
            content=content,
            metadata={"channel": "websocket", **metadata},
            idempotency_key=key,
        )
    except IdempotencyKeyReused as e:
        if resend_must_match and (
            e.turn is None or e.turn.content != content or e.turn.role != role.value
        ):
            raise
        turn = e.turn
    return turn_payload(turn)


def _user_append(*, owner_id: str, session_id: str, content: str, message_id: str) -> TurnPayload:
    """The user's turn of a message, stored once per message id (a resend returns the first).
    ``IdempotencyKeyReused`` for the same id with other content."""
    return _append_once(
        owner_id=owner_id,
        session_id=session_id,
        role=Role.USER,
        content=content,
        metadata={"message_id": message_id},
        key=f"ws:{message_id}:user",
        resend_must_match=True,
    )


def _reply_append(
    *, owner_id: str, session_id: str, content: str, message_id: str, reply_to: int, source: str
) -> TurnPayload:
    """The reply's assistant turn, stored once per message id (the one first stored stands)."""
    return _append_once(
        owner_id=owner_id,
        session_id=session_id,
        role=Role.ASSISTANT,
        content=content,
        metadata={"message_id": message_id, "reply_to": reply_to, "context_source": source},
        key=f"ws:{message_id}:reply",
        resend_must_match=False,
    )


def _exchange_open(
    *, owner_id: str, session_id: str, content: str, message_id: str
) -> tuple[TurnPayload, TurnPayload | None, int, ContextPayload | None]:
    """Under the owner's exchange lock, in one thread hop: the user's turn stored; then the reply
    already made for it, if any; else the reply's seq-to-be and the context to produce it from."""
    sent = _user_append(
        owner_id=owner_id, session_id=session_id, content=content, message_id=message_id
    )
    done = turn_by_key_get(owner_id=owner_id, idempotency_key=f"ws:{message_id}:reply")
    if done is not None:
        return sent, done, 0, None
    seq = owner_last_seq(owner_id=owner_id) + 1
    return sent, None, seq, selectors.context_get(owner_id=owner_id)


class Exchange:
    """One message of a socket and its reply, run as a task of its own: it goes on, stores the
    reply and publishes it when the socket that sent the message has gone."""

    def __init__(
        self,
        *,
        owner_id: str,
        session_id: str,
        content: str,
        message_id: str,
        responder: Any,
        origin: ChatSocket,
        reply_timeout: float,
        lock_timeout: float,
    ) -> None:
        self.owner_id = owner_id
        self.session_id = session_id
        self.content = content
        self.message_id = message_id
        self.responder = responder
        self.origin = weakref.ref(origin)
        self.reply_timeout = reply_timeout
        self.lock_timeout = lock_timeout

    def start(self) -> None:
        """Run it, unless the same message of the same owner runs here already: then that one
        answers to this exchange's socket from now on."""
        key = (self.owner_id, self.message_id)
        running = _running.get(key)
        if running is not None:
            running.origin = self.origin
            return
        _running[key] = self
        task = asyncio.get_running_loop().create_task(self._run())
        _exchanges.add(task)
        _exchanges_by_owner[self.owner_id] = _exchanges_by_owner.get(self.owner_id, 0) + 1
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        _exchanges.discard(task)
        _running.pop((self.owner_id, self.message_id), None)
        left = _exchanges_by_owner.get(self.owner_id, 1) - 1
        if left > 0:
            _exchanges_by_owner[self.owner_id] = left
        else:
            _exchanges_by_owner.pop(self.owner_id, None)
        origin = self.origin()
        if origin is not None:
            origin._exchange_done(self.message_id)

    def _error(self, code: str, detail: str) -> None:
        origin = self.origin()
        if origin is not None:
            origin._event({"type": "error", "code": code, "detail": detail, "id": self.message_id})

    async def _run(self) -> None:
        try:
            async with owner_exchange_lock(self.owner_id, timeout=self.lock_timeout):
                await self._locked()
        except MemoryUnavailable:
            self._error("unavailable", "The memory database is unavailable; send it again.")
        except ValidationError as e:
            self._error("invalid", " ".join(e.messages))
        except IdempotencyKeyReused:
            self._error("id_reused", "This message id was already used for another message.")
        except Exception:
            logger.exception("A websocket chat exchange failed")
            self._error("failed", "The message could not be answered; send it again.")

    async def _locked(self) -> None:
        owner_id = self.owner_id
        sent, done, seq, context = await _db(
            _exchange_open,
            owner_id=owner_id,
            session_id=self.session_id,
            content=self.content,
            message_id=self.message_id,
        )
        _publish(owner_id, {"type": "turn", "turn": sent})
        if done is not None:
            # A resend of a message already answered: the reply first made, never another.
            _publish(owner_id, {"type": "turn", "turn": done})
            return
        assert context is not None
        pieces = _replies.setdefault(owner_id, {}).setdefault(seq, [])
        try:
            offset = 0
            try:
                async with asyncio.timeout(self.reply_timeout):
                    async for chunk in reply_chunks(
                        self.responder, context=context, message=self.content
                    ):
                        if not chunk:
                            continue
                        pieces.append(chunk)
                        frame = {"type": "delta", "seq": seq, "text": chunk, "offset": offset}
                        _publish(owner_id, frame)
                        offset += len(chunk)
            except Exception:
                logger.exception("The responder failed while producing a websocket reply")
                self._error("responder_failed", "The assistant failed to answer; send it again.")
                return
            reply = await self._store(
                "".join(pieces), reply_to=sent["seq"], source=context["source"]
            )
        finally:
            owner_replies = _replies.get(owner_id, {})
            owner_replies.pop(seq, None)
            if not owner_replies:
                _replies.pop(owner_id, None)
        if reply["seq"] != seq:
            # NOTE: a writer outside the exchange lock took the seq; the turn frame still closes the
            # deltas.
            logger.warning(
                "A websocket reply was stored at %s, its deltas named %s (reply to %s).",
                reply["seq"],
                seq,
                sent["seq"],
            )
        _publish(owner_id, {"type": "turn", "turn": reply})

    async def _store(self, content: str, *, reply_to: int, source: str) -> TurnPayload:
        """Store the reply, trying again for a while if the database is away: it was produced
        and paid for. ``MemoryUnavailable`` when it stays away."""
        for wait in (0.2, 0.5, 1.0, 2.0, 4.0, None):
            try:
                return await _db(
                    _reply_append,
                    owner_id=self.owner_id,
                    session_id=self.session_id,
                    content=content,
                    message_id=self.message_id,
                    reply_to=reply_to,
                    source=source,
                )
            except MemoryUnavailable:
                if wait is None:
                    raise
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")
