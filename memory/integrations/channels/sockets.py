"""The websocket chat's socket: ``MemoryChatMixin`` (the protocol of docs/websocket.md on a
Channels consumer) and ``MemoryChatConsumer``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import weakref
from typing import Any, ClassVar, TypeGuard

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.core.exceptions import ValidationError
from django.db import connections
from rest_framework.settings import api_settings

from memory import permissions, selectors
from memory.exceptions import MemoryUnavailable
from memory.integrations.channels.exchanges import (
    CLOSE_NO_OWNER,
    CLOSE_TOO_BIG,
    CLOSE_UNSUPPORTED,
    INSTANCE,
    Exchange,
    _db,
    _exchanges_by_owner,
    _layer_out,
    _LayerOut,
    _snapshots,
    _sockets,
    group_name,
)
from memory.models import Role
from memory.payloads import TurnPayload
from memory.selectors.turns import owner_last_seq
from memory.validators import validate_content, validate_session_id

logger = logging.getLogger("memory.integrations.channels")


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


def _is_id(value: Any) -> TypeGuard[str]:
    return (
        isinstance(value, str) and 1 <= len(value) <= 64 and value.isascii() and value.isprintable()
    )


def _is_seq(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class MemoryChatMixin:
    """The chat protocol of docs/websocket.md on an ``AsyncWebsocketConsumer``.

    The owner is ``owner_resolve(scope)`` (a socket without one is closed with 4401); the reply
    comes from ``responder``. A site overrides ``owner_resolve``, ``message_refusal`` or
    ``throttles`` for its own rules.
    """

    responder: Any = None
    # Longest text frame taken, in bytes; a longer one closes the socket (1009), nothing stored.
    max_frame_bytes: ClassVar[int | None] = None
    # Messages of one socket without their reply yet, and exchanges of one owner in one process;
    # past either, a message is refused (``too_many_in_flight``).
    max_in_flight: ClassVar[int] = 4
    max_owner_in_flight: ClassVar[int] = 16
    # Seconds between database reads while a socket waits for a turn: the bound on delivery without
    # the channel layer.
    poll_seconds: ClassVar[float] = 1.0
    # Seconds between database reads of an idle socket: the bound on a turn the layer lost.
    idle_poll_seconds: ClassVar[float] = 5.0
    reply_timeout: ClassVar[float] = 120.0
    lock_timeout: ClassVar[float] = 150.0
    default_session_id: ClassVar[str] = "ws"
    # Seconds a socket waits for the client's first frame before it sends what is published;
    # ``None``: until that frame. A resume read later than this may find turns already sent.
    start_grace: ClassVar[float | None] = None
    # The channel layer this consumer reads itself, so one that does not answer never stops the
    # socket; ``None``: this process's sockets only.
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
        classes: list[type[Any]] = api_settings.DEFAULT_THROTTLE_CLASSES  # type: ignore[assignment]
        return [cls() for cls in classes]

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
        # NOTE: nothing goes out before the client's first frame: a resume sets the cursor first.
        self._started = asyncio.Event()
        self._first_resume: tuple[int, tuple[int, int] | None] | None = None
        self._layer: Any = None
        self._layer_name: str | None = None
        self._layer_ok = False
        try:
            owner_id = await self.owner_resolve(self.scope)
        except MemoryUnavailable:
            owner_id = None
        # NOTE: accepted, then closed with a readable code: a refused handshake is only a 403, which
        # a browser retries.
        if owner_id is None:
            await self.accept()  # type: ignore[attr-defined]
            await self.close(code=CLOSE_NO_OWNER)  # type: ignore[attr-defined]
            return
        try:
            self._cursor = await _db(owner_last_seq, owner_id=owner_id)
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
        if not isinstance(content, str):
            return await self._reply_error("invalid", "content must be a string.", message_id)
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
        """Every frame goes out from here, one at a time: turns in seq order, none twice (a gap
        filled from the database first), deltas only where they extend this socket's reply."""
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
        polled = time.monotonic()
        while True:
            await asyncio.sleep(self.poll_seconds)
            now = time.monotonic()
            for message_id, since in list(self._pending.items()):
                if now - since > self.lock_timeout + self.reply_timeout:
                    self._pending.pop(message_id, None)
            waiting = self._pending or self._partial or self._stale or not self._layer_ok
            if waiting or now - polled >= self.idle_poll_seconds:
                polled = now
                self._put(("poll", None))

    async def _listen(self) -> None:
        """This socket's events from the other instances, through the channel layer; a failing layer
        is joined again a second later."""
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


class MemoryChatConsumer(MemoryChatMixin, AsyncWebsocketConsumer):  # type: ignore[misc]
    """The websocket chat of docs/websocket.md: route it with
    ``MemoryChatConsumer.as_asgi(responder=...)`` under ``AuthMiddlewareStack``."""
