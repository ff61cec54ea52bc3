"""Chat over a websocket with Django Channels: ``MemoryChatConsumer`` (or ``MemoryChatMixin`` on a
site's own consumer) stores each message and its reply in the socket owner's memory, streams the
reply as it is produced, and gives a client that reconnects, to any instance, every turn it
missed exactly once and in order. docs/websocket.md states the protocol and its bounds.

Installed with the extra ``channels`` (Django Channels, and ``channels-redis`` for a channel
layer shared by several instances).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar, TypeVar

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import connections
from rest_framework.settings import api_settings

from memory import permissions, selectors, services
from memory.exceptions import IdempotencyKeyReused, MemoryUnavailable
from memory.extras import extra_install
from memory.models import Role
from memory.payloads import ContextPayload, TurnPayload, turn_payload
from memory.validators import validate_content, validate_session_id

try:
    from channels.generic.websocket import AsyncWebsocketConsumer
    from channels.layers import get_channel_layer
except ImportError as e:
    raise ImportError(
        "memory.integrations.channels needs Django Channels, the extra channels: "
        + extra_install("channels")
    ) from e

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Close codes: a frame over the size cap (RFC 6455's "message too big"), a binary frame
# ("unsupported data"), and a socket with no owner (not authenticated).
CLOSE_TOO_BIG = 1009
CLOSE_UNSUPPORTED = 1003
CLOSE_NO_OWNER = 4401

# This process, in what it publishes on the channel layer: it has delivered its own events itself.
INSTANCE = uuid.uuid4().hex
# The first key of the Postgres advisory lock that serializes the exchanges of one owner.
LOCK_NAMESPACE = 0x6D656D  # "mem"

# Exchanges running in this process, kept here so that none is collected or cancelled with the
# socket that started it; and the text produced so far of each reply in production, by owner
# and the seq the reply will have (what a client that reconnects is sent first).
_exchanges: set[asyncio.Task[None]] = set()
_exchanges_by_owner: dict[str, int] = {}
# The exchange of each (owner, message id) running here: a resend joins it instead of another.
_running: dict[tuple[str, str], Exchange] = {}
_replies: dict[str, dict[int, list[str]]] = {}
# The sockets of this process, by owner.
_sockets: dict[str, weakref.WeakSet[MemoryChatMixin]] = {}
_owner_locks: dict[str, asyncio.Lock] = {}
# Connections this process holds for exchange locks at most (a pool: each an owner with a reply in
# production); an exchange past it waits for one.
MAX_LOCK_CONNECTIONS = 24
_lock_pool_open: Any = None


def group_name(owner_id: str) -> str:
    """The channel layer group of an owner's sockets (a hash: owner ids hold ``@`` and ``:``,
    which group names may not)."""
    return "memory-chat." + hashlib.blake2b(owner_id.encode(), digest_size=16).hexdigest()


def _lock_key(owner_id: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(owner_id.encode(), digest_size=4).digest(), "big", signed=True
    )


async def _db(fn: Callable[..., T], /, **kwargs: Any) -> T:
    """``fn(**kwargs)`` in a worker thread, its database connection closed (returned to the pool)
    at the end: a socket holds no connection between two of its reads."""

    def run() -> T:
        try:
            return fn(**kwargs)
        finally:
            connections.close_all()

    return await sync_to_async(run, thread_sensitive=False)()


@contextlib.asynccontextmanager
async def owner_exchange_lock(owner_id: str, *, timeout: float) -> AsyncIterator[None]:
    """Hold the owner's exchange lock: one exchange of an owner at a time, across every instance.

    On PostgreSQL, a transaction-level advisory lock on a connection of a pool of its own
    (released by the rollback at the end, or by Postgres when the process dies); elsewhere
    (SQLite: one instance) a lock of this process. Raises ``MemoryUnavailable`` when the
    database cannot be reached or the lock is not had within ``timeout`` seconds.
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
                    # NOTE: the lock goes with the transaction; the connection back to the pool.
                    with contextlib.suppress(psycopg.Error):
                        await conn.rollback()
        except (psycopg.Error, OSError) as e:
            raise MemoryUnavailable("The owner's exchange lock was not had.") from e
        except TimeoutError as e:
            # NOTE: psycopg_pool's PoolTimeout is a psycopg.OperationalError, caught above.
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
    """Everything this process publishes on the channel layer, sent in order by one task; while
    the layer does not answer (a send past ``timeout``), sends are dropped for ``pause``
    seconds: the other instances' sockets catch up from the database instead."""

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


def _user_append(*, owner_id: str, session_id: str, content: str, message_id: str) -> TurnPayload:
    """The user's turn of a message, stored once per message id: a resend (even labelled with
    another session) returns the turn first stored. ``IdempotencyKeyReused`` for the same id
    with other content."""
    try:
        turn = services.turn_append(
            owner_id=owner_id,
            session_id=session_id,
            role=Role.USER.value,
            content=content,
            metadata={"channel": "websocket", "message_id": message_id},
            idempotency_key=f"ws:{message_id}:user",
        )
    except IdempotencyKeyReused as e:
        if e.turn is None or e.turn.content != content or e.turn.role != Role.USER.value:
            raise
        turn = e.turn
    return turn_payload(turn)


def _reply_append(
    *, owner_id: str, session_id: str, content: str, message_id: str, reply_to: int, source: str
) -> TurnPayload:
    """The reply's assistant turn, stored once per message id (the one first stored stands)."""
    try:
        turn = services.turn_append(
            owner_id=owner_id,
            session_id=session_id,
            role=Role.ASSISTANT.value,
            content=content,
            metadata={
                "channel": "websocket",
                "message_id": message_id,
                "reply_to": reply_to,
                "context_source": source,
            },
            idempotency_key=f"ws:{message_id}:reply",
        )
    except IdempotencyKeyReused as e:
        turn = e.turn
    return turn_payload(turn)


def _exchange_open(
    *, owner_id: str, session_id: str, content: str, message_id: str
) -> tuple[TurnPayload, TurnPayload | None, int, ContextPayload | None]:
    """Under the owner's exchange lock, in one thread hop: the user's turn stored (once per
    message id); then the reply already made for it, if any; else the seq the reply will have
    and the context to produce it from.

    NOTE: the exchange lock is held, so no exchange of this owner appends before the reply: the
    reply will be turn last_seq + 1, and the deltas say so (docs/websocket.md).
    """
    sent = _user_append(
        owner_id=owner_id, session_id=session_id, content=content, message_id=message_id
    )
    done = selectors.turn_by_key_get(owner_id=owner_id, idempotency_key=f"ws:{message_id}:reply")
    if done is not None:
        return sent, done, 0, None
    seq = selectors.owner_last_seq(owner_id=owner_id) + 1
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
        origin: MemoryChatMixin,
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
            # NOTE: a resend of a message already answered: the reply first made, never another.
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
            # NOTE: a writer outside the exchange lock (the REST API, the HTTP chat page) took
            # the seq meanwhile; the reply's turn frame still closes the deltas (its reply_to).
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


# -- the socket --------------------------------------------------------------------------------


class _ScopeRequest:
    """What DRF's throttles read of a request, from a websocket's scope."""

    def __init__(self, scope: dict[str, Any]) -> None:
        self.user = scope.get("user")
        self.session = scope.get("session")
        self.META: dict[str, str] = {}
        client = scope.get("client")
        if client:
            self.META["REMOTE_ADDR"] = str(client[0])
        for name, value in scope.get("headers", ()):
            key = "HTTP_" + name.decode("latin-1").upper().replace("-", "_")
            self.META[key] = value.decode("latin-1")


def _is_id(value: Any) -> bool:
    return (
        isinstance(value, str) and 1 <= len(value) <= 64 and value.isascii() and value.isprintable()
    )


def _is_seq(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class MemoryChatMixin:
    """The chat protocol of docs/websocket.md on an ``AsyncWebsocketConsumer``.

    The owner is ``owner_resolve(scope)`` (by default the mapping of ``scope["user"]``, as
    Channels' ``AuthMiddlewareStack`` sets it); a socket without one is closed with 4401. The
    reply comes from ``responder`` (``astream(*, context, message)`` or ``respond``). A site
    overrides ``owner_resolve``, ``message_refusal`` or ``throttles`` for its own rules.
    """

    responder: Any = None
    # Longest text frame taken, in bytes; a longer one closes the socket (1009), nothing stored.
    max_frame_bytes: ClassVar[int | None] = None
    # Messages of one socket whose reply it has not had yet, and exchanges of one owner running
    # in one process; past either, a message is refused (``too_many_in_flight``).
    max_in_flight: ClassVar[int] = 4
    max_owner_in_flight: ClassVar[int] = 16
    # Seconds between two reads of the database while a socket waits for a turn (or the channel
    # layer is away): the bound on a turn's delivery without the layer.
    poll_seconds: ClassVar[float] = 1.0
    reply_timeout: ClassVar[float] = 120.0
    lock_timeout: ClassVar[float] = 150.0
    default_session_id: ClassVar[str] = "ws"
    # Seconds a socket waits for the client's first frame before it sends what is published.
    start_grace: ClassVar[float] = 2.0
    # The channel layer this consumer uses (read by itself, so that a layer that does not
    # answer never stops the socket); ``None``: this process's sockets only.
    memory_layer_alias: ClassVar[str | None] = "default"
    # Channels' own handling of the layer is off: see memory_layer_alias.
    channel_layer_alias = "memory.integrations.channels:none"

    owner_id: str | None
    scope: dict[str, Any]

    # -- what a site may override ----------------------------------------------------------

    async def owner_resolve(self, scope: dict[str, Any]) -> str | None:
        """The socket's owner: the id ``MEMORY["OWNER_ID_FOR"]`` maps the authenticated user to,
        or ``None`` (the socket is closed)."""
        user = scope.get("user")
        if user is None or not user.is_authenticated:
            return None
        return await sync_to_async(permissions.owner_id_for, thread_sensitive=False)(user)

    def throttles(self) -> list[Any]:
        """The throttles a message must pass: the HTTP API's (``DEFAULT_THROTTLE_CLASSES``)."""
        return [cls() for cls in api_settings.DEFAULT_THROTTLE_CLASSES]

    async def message_refusal(self, *, owner_id: str, content: str) -> str | None:
        """Why the owner may not send this message now (an error frame ``refused``), or ``None``."""
        return None

    # -- the socket's life ------------------------------------------------------------------

    async def connect(self) -> None:
        self.owner_id = None
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(1000)
        self._cursor = 0
        self._partial: dict[int, int] = {}
        self._pending: dict[str, float] = {}
        self._stale = False
        self._synced_at: dict[int, float] = {}
        self._tasks: list[asyncio.Task[None]] = []
        # NOTE: nothing goes out before the client's first frame (or start_grace s): a resume
        # sets the cursor first, so that no turn published meanwhile goes out ahead of the ones
        # it missed.
        self._started = asyncio.Event()
        self._first_resume: tuple[int, tuple[int, int] | None] | None = None
        self._layer: Any = None
        self._layer_name: str | None = None
        self._layer_ok = False
        try:
            owner_id = await self.owner_resolve(self.scope)
        except MemoryUnavailable:
            owner_id = None
        # NOTE: accepted, then closed with a code the client can read (a refused handshake
        # is only a 403 to a browser, which would try again and again).
        if owner_id is None:
            await self.accept()  # type: ignore[attr-defined]
            await self.close(code=CLOSE_NO_OWNER)  # type: ignore[attr-defined]
            return
        try:
            self._cursor = await _db(selectors.owner_last_seq, owner_id=owner_id)
        except MemoryUnavailable:
            await self.accept()  # type: ignore[attr-defined]
            await self.close(code=1011)  # type: ignore[attr-defined]
            return
        self.owner_id = owner_id
        _sockets.setdefault(owner_id, weakref.WeakSet()).add(self)
        await self.accept()  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._pump()), loop.create_task(self._poll())]
        if self.memory_layer_alias is not None:
            self._layer = get_channel_layer(self.memory_layer_alias)
        if self._layer is not None:
            self._tasks.append(loop.create_task(self._listen()))

    async def disconnect(self, code: int) -> None:
        for task in getattr(self, "_tasks", ()):
            task.cancel()
        owner_id = getattr(self, "owner_id", None)
        if owner_id is not None:
            sockets = _sockets.get(owner_id)
            if sockets is not None:
                sockets.discard(self)
                if not sockets:
                    _sockets.pop(owner_id, None)
        if self._layer is not None and self._layer_name is not None and owner_id is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_LayerOut.timeout):
                    await self._layer.group_discard(group_name(owner_id), self._layer_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.owner_id is None:
            return
        if text_data is None:
            await self.close(code=CLOSE_UNSUPPORTED)  # type: ignore[attr-defined]
            return
        cap = self._frame_cap()
        if len(text_data) * 4 > cap and len(text_data.encode()) > cap:
            await self.close(code=CLOSE_TOO_BIG)  # type: ignore[attr-defined]
            return
        try:
            data = json.loads(text_data)
        except ValueError:
            return await self._reply_error("bad_json", "A frame must be a JSON object.")
        if not isinstance(data, dict):
            return await self._reply_error("bad_json", "A frame must be a JSON object.")
        kind = data.get("type")
        if kind not in ("message", "resume"):
            return await self._reply_error("bad_type", 'type must be "message" or "resume".')
        if kind == "message":
            self._started.set()
            await self._message(data)
        else:
            after = data.get("after_seq")
            if not _is_seq(after):
                return await self._reply_error("invalid", "after_seq must be an integer >= 0.")
            partial = data.get("partial")
            have: tuple[int, int] | None = None
            if (
                isinstance(partial, dict)
                and _is_seq(partial.get("seq"))
                and _is_seq(partial.get("chars"))
            ):
                have = (partial["seq"], partial["chars"])
            if not self._started.is_set():
                self._first_resume = (after, have)
                self._started.set()
            else:
                self._put(("resume", (after, have)))

    def _frame_cap(self) -> int:
        if self.max_frame_bytes is not None:
            return self.max_frame_bytes
        from memory.conf import conf

        # NOTE: the longest content, each character as a JSON escape, and room for the rest.
        return conf.MAX_TURN_CHARS * 6 + 1024

    async def _reply_error(self, code: str, detail: str, message_id: str | None = None) -> None:
        frame: dict[str, Any] = {"type": "error", "code": code, "detail": detail}
        if message_id is not None:
            frame["id"] = message_id
        await self._send(frame)

    async def _message(self, data: dict[str, Any]) -> None:
        assert self.owner_id is not None
        message_id, content = data.get("id"), data.get("content")
        session_id = data.get("session_id", self.default_session_id)
        if not _is_id(message_id):
            return await self._reply_error("invalid", "id must be 1-64 printable ASCII characters.")
        try:
            validate_content(content)
            validate_session_id(session_id)
        except ValidationError as e:
            return await self._reply_error("invalid", " ".join(e.messages), message_id)
        if message_id not in self._pending and (
            len(self._pending) >= self.max_in_flight
            or _exchanges_by_owner.get(self.owner_id, 0) >= self.max_owner_in_flight
        ):
            return await self._reply_error(
                "too_many_in_flight", "Wait for the replies in flight first.", message_id
            )
        wait = await sync_to_async(self._throttle_wait, thread_sensitive=False)()
        if wait is not None:
            return await self._reply_error(
                "throttled", f"Too many messages; try again in {wait} s.", message_id
            )
        try:
            refusal = await self.message_refusal(owner_id=self.owner_id, content=content)
        except MemoryUnavailable:
            refusal = "The memory database is unavailable; send it again."
        if refusal is not None:
            return await self._reply_error("refused", refusal, message_id)
        self._pending[message_id] = time.monotonic()
        Exchange(
            owner_id=self.owner_id,
            session_id=session_id,
            content=content,
            message_id=message_id,
            responder=self.responder,
            origin=self,
            reply_timeout=self.reply_timeout,
            lock_timeout=self.lock_timeout,
        ).start()

    def _throttle_wait(self) -> int | None:
        """Whole seconds to wait, the longest of the throttles that refuse; ``None`` if none."""
        try:
            request = _ScopeRequest(self.scope)
            waits = []
            for throttle in self.throttles():
                if not throttle.allow_request(request, None):
                    waits.append(throttle.wait() or 1.0)
            return max(1, int(max(waits) + 0.999)) if waits else None
        finally:
            connections.close_all()

    # -- what reaches the socket, in order and once -------------------------------------------

    def _put(self, event: tuple[str, Any]) -> None:
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            # NOTE: a client that does not read: its turns come from the database once it does.
            self._stale = True

    def _event(self, frame: dict[str, Any]) -> None:
        """A frame published for this socket's owner (or an error for this socket)."""
        self._put(("frame", frame))

    def _exchange_done(self, message_id: str) -> None:
        self._put(("done", message_id))

    async def _send(self, frame: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):
            await self.send(text_data=json.dumps(frame, ensure_ascii=False))  # type: ignore[attr-defined]

    async def _pump(self) -> None:
        """Every frame goes out from here, one at a time: turns in seq order with none twice
        (a gap is filled from the database first), deltas only where they extend what this
        socket has of their reply."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.start_grace):
                await self._started.wait()
        self._started.set()
        if self._first_resume is not None:
            try:
                await self._resume(*self._first_resume)
            except MemoryUnavailable:
                self._stale = True
        while True:
            kind, value = await self._queue.get()
            try:
                if kind == "frame":
                    await self._frame_out(value)
                elif kind == "resume":
                    await self._resume(*value)
                elif kind == "poll":
                    self._stale = False
                    await self._catch_up()
                elif kind == "done":
                    self._pending.pop(value, None)
            except MemoryUnavailable:
                self._stale = True
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("A websocket chat frame could not be sent")

    async def _frame_out(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "turn":
            await self._turn_out(frame["turn"])
        elif kind == "delta":
            await self._delta_out(frame)
        else:
            if frame.get("id") is not None:
                self._pending.pop(frame["id"], None)
            await self._send(frame)

    def _seen(self, turn: TurnPayload) -> None:
        metadata = turn.get("metadata") or {}
        if turn["role"] == Role.ASSISTANT.value and isinstance(metadata, dict):
            self._pending.pop(str(metadata.get("message_id")), None)

    async def _turn_out(self, turn: TurnPayload) -> None:
        seq = turn["seq"]
        if seq <= self._cursor:
            self._seen(turn)
            return
        if seq > self._cursor + 1:
            await self._catch_up(upto=seq)
            if seq <= self._cursor:
                return
        await self._send({"type": "turn", "turn": turn})
        self._cursor = seq
        self._partial.pop(seq, None)
        self._seen(turn)

    async def _delta_out(self, frame: dict[str, Any]) -> None:
        seq, text, offset = frame["seq"], frame["text"], frame.get("offset", 0)
        if seq <= self._cursor:
            return
        if seq > self._cursor + 1:
            await self._catch_up(upto=seq - 1)
            if seq > self._cursor + 1:
                self._stale = True
                return
        have = self._partial.get(seq, 0)
        end = offset + len(text)
        if end <= have:
            return
        if offset > have:
            self._sync_request(seq)
            return
        await self._send(
            {"type": "delta", "seq": seq, "text": text[have - offset :], "offset": have}
        )
        self._partial[seq] = end

    async def _catch_up(self, upto: int | None = None) -> None:
        """Send the owner's turns after this socket's cursor from the database, oldest first
        (up to ``upto``, or all), a page at a time."""
        assert self.owner_id is not None
        while upto is None or self._cursor < upto:
            turns, more = await _db(
                selectors.turn_list, owner_id=self.owner_id, after=self._cursor, limit=200
            )
            for turn in turns:
                await self._send({"type": "turn", "turn": turn})
                self._cursor = turn["seq"]
                self._partial.pop(turn["seq"], None)
                self._seen(turn)
            if not more:
                return

    async def _resume(self, after: int, have: tuple[int, int] | None) -> None:
        assert self.owner_id is not None
        self._cursor = after
        self._partial = {have[0]: have[1]} if have is not None and have[0] > after else {}
        await self._catch_up()
        for frame in _snapshots(self.owner_id):
            await self._delta_out(frame)
        if self._layer is not None and self._layer_name is not None:
            _layer_out.put(
                "group",
                group_name(self.owner_id),
                {"type": "memory.chat.sync", "origin": INSTANCE, "to": self._layer_name},
            )

    def _sync_request(self, seq: int) -> None:
        """Ask the instance producing reply ``seq`` for its text so far (at most once a second)."""
        now = time.monotonic()
        if now - self._synced_at.get(seq, 0.0) < 1.0:
            return
        self._synced_at[seq] = now
        assert self.owner_id is not None
        for frame in _snapshots(self.owner_id):
            self._event(frame)
        if self._layer is not None and self._layer_name is not None:
            _layer_out.put(
                "group",
                group_name(self.owner_id),
                {"type": "memory.chat.sync", "origin": INSTANCE, "to": self._layer_name},
            )

    async def _poll(self) -> None:
        """Read the database every ``poll_seconds`` while this socket waits for something (a
        reply to its message, the rest of a reply) or may have missed a published turn."""
        while True:
            await asyncio.sleep(self.poll_seconds)
            now = time.monotonic()
            for message_id, since in list(self._pending.items()):
                if now - since > self.lock_timeout + self.reply_timeout:
                    self._pending.pop(message_id, None)
            if self._pending or self._partial or self._stale or not self._layer_ok:
                self._put(("poll", None))

    async def _listen(self) -> None:
        """This socket's events from the other instances, through the channel layer; a layer
        that fails is joined again a second later (the database catch-up covers the gap)."""
        assert self.owner_id is not None
        layer = self._layer
        while True:
            try:
                if self._layer_name is None:
                    self._layer_name = await layer.new_channel()
                async with asyncio.timeout(_LayerOut.timeout):
                    await layer.group_add(group_name(self.owner_id), self._layer_name)
                self._layer_ok = True
                self._stale = True
                while True:
                    message = await layer.receive(self._layer_name)
                    self._layer_message(message)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning(
                    "The channel layer failed a chat socket; joining again.", exc_info=True
                )
                self._layer_ok = False
                await asyncio.sleep(1.0)

    def _layer_message(self, message: dict[str, Any]) -> None:
        if message.get("origin") == INSTANCE:
            return
        kind = message.get("type")
        if kind == "memory.chat" and isinstance(message.get("frame"), dict):
            self._event(message["frame"])
        elif kind == "memory.chat.sync" and isinstance(message.get("to"), str):
            assert self.owner_id is not None
            for frame in _snapshots(self.owner_id):
                _layer_out.put(
                    "send",
                    message["to"],
                    {"type": "memory.chat", "origin": INSTANCE, "frame": frame},
                )


class MemoryChatConsumer(MemoryChatMixin, AsyncWebsocketConsumer):
    """The websocket chat of docs/websocket.md: route it with
    ``MemoryChatConsumer.as_asgi(responder=...)`` under ``AuthMiddlewareStack``."""
