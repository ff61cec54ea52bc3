"""The OpenAI Agents SDK's session over the memory: ``MemorySession(owner_id=..., session_id=...)``,
the SDK's ``Session`` protocol (async). Needs the extra ``openai-agents``."""

from __future__ import annotations

from memory.extras import extra_needed

with extra_needed("memory.integrations.openai_agents", "openai-agents", "openai-agents"):
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings
    from agents.memory.session_settings import coerce_session_settings

import asyncio
import copy
import json
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar, cast

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import transaction

from memory import selectors, services
from memory.conf import conf
from memory.exceptions import database_guard
from memory.payloads import TurnPayload
from memory.selectors.turns import aturn_tail
from memory.services.turns import aturns_prune
from memory.validators import validate_owner_id, validate_session_id

# The key of a turn's metadata that holds the SDK item it was stored from.
METADATA_KEY = "openai_agents"
# The turn roles of a message item's roles.
MESSAGE_ROLES = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
}
# Item types that answer the model (a tool's result, an approval): stored as ``tool`` turns.
ANSWER_TYPES = ("_output", "mcp_approval_response")
# How often ``pop_item`` looks again when the turn it found was deleted meanwhile.
POP_ATTEMPTS = 3
T = TypeVar("T")


class ItemTurn(NamedTuple):
    """What one SDK item is stored as: a turn's role, content and metadata."""

    role: str
    content: str
    metadata: dict[str, Any]


def _is_message(item: Mapping[str, Any]) -> bool:
    return item.get("type") in (None, "message")


def _item_role(item: Mapping[str, Any]) -> str:
    kind = item.get("type")
    if _is_message(item):
        given = item.get("role")
        role = MESSAGE_ROLES.get(given) if isinstance(given, str) else None
        if role is None:
            raise ValueError(
                f"A message item of role {item.get('role')!r} cannot be stored as a memory turn."
            )
        return role
    if not isinstance(kind, str):
        raise ValueError(f"An item of type {kind!r} cannot be stored as a memory turn.")
    return "tool" if kind.endswith(ANSWER_TYPES) else "assistant"


def _text_path(item: Mapping[str, Any]) -> tuple[str | int, ...] | None:
    """Where the item holds its one text (a string content, a single text part, a string output);
    ``None`` otherwise."""
    if _is_message(item):
        content = item.get("content")
        if isinstance(content, str):
            return ("content",)
        if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
            texts = [f for f in ("text", "refusal") if isinstance(content[0].get(f), str)]
            if len(texts) == 1:
                return ("content", 0, texts[0])
        return None
    if str(item.get("type")).endswith("_output") and isinstance(item.get("output"), str):
        return ("output",)
    return None


def _parts_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        text = next((part[f] for f in ("text", "refusal") if isinstance(part.get(f), str)), None)
        texts.append(text if text is not None else f"[{part.get('type')}]")
    return "\n".join(texts)


def _rendering(item: Mapping[str, Any]) -> str:
    """The text another door shows of an item without one text, cut to
    ``MEMORY["MAX_TURN_CHARS"]``."""
    kind = item.get("type")
    if _is_message(item):
        text = _parts_text(item.get("content"))
    elif kind == "function_call":
        text = f"{item.get('name')}({item.get('arguments')})"
    elif str(kind).endswith("_output"):
        text = _parts_text(item.get("output"))
    elif kind == "reasoning":
        text = _parts_text(item.get("summary"))
    else:
        text = ""
    text = text or f"[{kind or 'message'}]"
    limit = conf.MAX_TURN_CHARS
    return text if len(text) <= limit else text[: limit - 1] + "…"


def turn_from_item(item: Mapping[str, Any]) -> ItemTurn:
    """The turn an SDK input item is stored as.

    A message becomes a turn of its role (``developer`` as ``system``); a tool's or an approval's
    answer a ``tool`` turn; anything else the model produced an ``assistant`` turn. The content is
    the item's one text, and the item is kept in ``metadata["openai_agents"]`` without it; else the
    content is a rendering and the item is kept whole. Raises ``ValueError`` for an item that is not
    a JSON object with a message role or a type, and ``TypeError`` (``json.dumps``'s, as the SDK's
    sessions raise it) for one holding a value JSON cannot.
    """
    if not isinstance(item, Mapping):
        raise ValueError(f"A session item is a JSON object, not a {type(item).__name__}.")
    # NOTE: as the SDK's sessions, which store json.dumps(item): a value JSON cannot hold (an
    # object, a set, bytes) is json's TypeError.
    json.dumps(item)
    role = _item_role(item)
    path = _text_path(item)
    if path is None:
        return ItemTurn(role, _rendering(item), {METADATA_KEY: {"item": dict(item), "text": None}})
    kept = copy.deepcopy(dict(item))
    holder: Any = kept
    for step in path[:-1]:
        holder = holder[step]
    text, holder[path[-1]] = holder[path[-1]], None
    return ItemTurn(role, text, {METADATA_KEY: {"item": kept, "text": list(path)}})


def _placed(item: Any, path: Any, text: str) -> bool:
    """Put ``text`` back where ``turn_from_item`` took it from; whether the path was there."""
    if not isinstance(path, list) or not path:
        return False
    holder = item
    for step in path:
        found = (isinstance(holder, dict) and isinstance(step, str) and step in holder) or (
            isinstance(holder, list)
            and isinstance(step, int)
            and not isinstance(step, bool)
            and 0 <= step < len(holder)
        )
        if not found:
            return False
        parent, holder = holder, holder[step]
    parent[path[-1]] = text
    return True


def item_from_turn(turn: TurnPayload) -> dict[str, Any]:
    """The SDK input item of a turn: the item it was stored from, exactly; a turn from another door
    as ``{"role", "content"}``, a ``tool`` turn as a system message (it keeps no call id)."""
    kept = turn["metadata"].get(METADATA_KEY)
    if isinstance(kept, dict) and isinstance(kept.get("item"), dict):
        item: dict[str, Any] = copy.deepcopy(kept["item"])
        if kept.get("text") is None or _placed(item, kept["text"], turn["content"]):
            return item
    if turn["role"] == "tool":
        return {"role": "system", "content": f"Tool output: {turn['content']}"}
    return {"role": turn["role"], "content": turn["content"]}


def _items(turns: Sequence[TurnPayload]) -> list[TResponseInputItem]:
    # NOTE: the window as it is, as the SDK's sessions return theirs: the Runner drops an output
    # whose call is outside it.
    return [cast(TResponseInputItem, item_from_turn(turn)) for turn in turns]


def _turns_append(owner_id: str, session_id: str, turns: Sequence[ItemTurn]) -> None:
    with database_guard(), transaction.atomic():
        for turn in turns:
            services.turn_append(
                owner_id=owner_id,
                session_id=session_id,
                role=turn.role,
                content=turn.content,
                metadata=turn.metadata,
            )


_aturns_append = sync_to_async(_turns_append, thread_sensitive=True)


async def _settled(write: Awaitable[T]) -> T:
    """``await write``; cancelled meanwhile (once or more), the write still ends (committed or
    rolled back) before ``CancelledError`` reaches the caller, so the caller knows its outcome
    and a retry never races it, as the SDK's own sessions settle theirs. A write cancelled
    and then failed raises ``CancelledError``: the cancellation wins."""
    task = asyncio.ensure_future(write)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not task.cancelled():
            # NOTE: retrieved, so the loop does not report it as never retrieved.
            task.exception()
        raise asyncio.CancelledError
    return task.result()


class MemorySession:
    """The OpenAI Agents SDK ``Session`` of one session of a memory owner (docs/agents.md).

    Every session reads the owner's one history. ``get_items(limit)``: the newest ``limit`` turns
    (default ``session_settings.limit``; with neither, every turn), oldest first, as SDK items.

    ``add_items(items)`` appends each item as a turn of ``session_id`` (``turn_from_item``) in one
    transaction: all of them or, for any refused item (``ValueError``, ``TypeError``,
    ``ValidationError``: a text over ``MAX_TURN_CHARS``, an item over ``MAX_JSON_BYTES``), none.

    ``pop_item()`` deletes and returns this session's newest turn among the owner's newest
    ``MAX_CONTEXT_TURNS`` (``services.turn_delete``: facts it stated stay), else ``None``.
    ``clear_session()`` deletes every turn of the owner, of every session, and keeps the facts.
    After ``close()`` every call raises ``RuntimeError``.

    A cancelled write raises ``CancelledError`` only once it has committed or rolled back.
    Errors: ``ValidationError`` for a bad id, limit or turn, ``TypeError`` for what JSON cannot
    hold, ``MemoryUnavailable`` when the database is down (nothing stored); never Redis's. The
    owner is the caller's to name, never the model's.
    """

    session_id: str
    session_settings: SessionSettings

    def __init__(
        self,
        *,
        owner_id: str,
        session_id: str,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        for field, validator, value in (
            ("user_id", validate_owner_id, owner_id),
            ("session_id", validate_session_id, session_id),
        ):
            try:
                validator(value)
            except ValidationError as e:
                raise ValidationError({field: e.messages}) from e
        self.owner_id = owner_id
        self.session_id = session_id
        # NOTE: as the SDK's sessions: a dict becomes SessionSettings (an unknown key a TypeError).
        self.session_settings = (
            coerce_session_settings(cast(Any, session_settings))
            if session_settings is not None
            else SessionSettings()
        )
        self._closed = False

    def __repr__(self) -> str:
        return f"MemorySession(owner_id={self.owner_id!r}, session_id={self.session_id!r})"

    def _open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def close(self) -> None:
        """Close the session, as the SDK's sessions close: every later call raises
        ``RuntimeError``. It holds no connection of its own (the app's are Django's)."""
        self._closed = True

    def _limit(self, limit: int | None) -> int | None:
        if limit is None:
            limit = self.session_settings.limit
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise ValidationError({"limit": ["Ensure this value is an integer >= 0."]})
        return limit

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        self._open()
        n = self._limit(limit)
        if n == 0:
            return []
        if n is not None and n <= conf.MAX_CONTEXT_TURNS:
            context = await selectors.acontext_get(owner_id=self.owner_id, turns=n)
            return _items(context["turns"])
        return _items(await aturn_tail(owner_id=self.owner_id, limit=n))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        # NOTE: refused when closed before the empty list returns, as the SDK's sessions do;
        # every item is converted before the first is stored.
        self._open()
        turns = [turn_from_item(cast(Mapping[str, Any], item)) for item in items]
        if turns:
            await _settled(_aturns_append(self.owner_id, self.session_id, turns))

    def _last_turn(self) -> TurnPayload | None:
        """This session's newest turn among the owner's newest ``MAX_CONTEXT_TURNS``: first in the
        cached window, then in the longest context."""
        for n in dict.fromkeys(
            (min(conf.CACHE_TURNS, conf.MAX_CONTEXT_TURNS), conf.MAX_CONTEXT_TURNS)
        ):
            turns = selectors.context_get(owner_id=self.owner_id, turns=n)["turns"]
            mine = [turn for turn in turns if turn["session_id"] == self.session_id]
            if mine:
                return mine[-1]
            if len(turns) < n:
                return None
        return None

    def _pop(self) -> TResponseInputItem | None:
        for _ in range(POP_ATTEMPTS):
            turn = self._last_turn()
            if turn is None:
                return None
            # NOTE: False when another pop or a prune took it since the read: look again.
            if services.turn_delete(owner_id=self.owner_id, seq=turn["seq"]):
                return cast(TResponseInputItem, item_from_turn(turn))
        return None

    async def pop_item(self) -> TResponseInputItem | None:
        self._open()
        return await _settled(sync_to_async(self._pop, thread_sensitive=True)())

    async def clear_session(self) -> None:
        self._open()
        await _settled(aturns_prune(owner_id=self.owner_id, keep_last=0))


__all__ = ["ItemTurn", "MemorySession", "item_from_turn", "turn_from_item"]
