"""LangGraph's checkpointer on the app's database: ``MemoryCheckpointSaver(owner_id=...)``, a
``BaseCheckpointSaver`` (sync and async) whose threads are the owner's sessions, and whose
graph messages become the owner's turns."""

from __future__ import annotations

import builtins
import hashlib
import json
import random
from collections.abc import Iterator, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from memory import aio
from memory.conf import conf
from memory.integrations.threads import thread_connection
from memory.selectors import checkpoints as checkpoint_reads
from memory.services import checkpoints as checkpoint_writes
from memory.services.checkpoints import BlobInput, MirrorTurn, ThreadAddress, WriteInput
from memory.validators import validate_owner_id, validate_session_id

# The roles of LangChain message types, and of the roles a message dict may carry.
MESSAGE_ROLES = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "tool",
}
# The prefix of the idempotency key of a turn mirrored from a thread's message.
TURN_KEY_PREFIX = "langgraph:"
# Checkpoints ``list`` reads per query, and ``alist`` per hop to Django's thread.
ALIST_PAGE = 50


def _pages(limit: int | None) -> Iterator[tuple[int, int]]:
    """The (size, offset) of each page of a listing of at most ``limit`` checkpoints (None: all),
    ``ALIST_PAGE`` at a time; the caller stops at the first page shorter than its size."""
    offset = 0
    while limit is None or offset < limit:
        size = ALIST_PAGE if limit is None else min(ALIST_PAGE, limit - offset)
        yield size, offset
        offset += size


def _json_safe(value: Any) -> Any:
    """``value`` as JSON jsonb takes: no NUL in strings, anything not JSON as its text."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {str(k).replace("\x00", ""): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value).replace("\x00", "")


def _clean_text(text: str) -> str:
    """What a turn can hold of ``text``: NUL and lone surrogates replaced, cut to
    ``MEMORY["MAX_TURN_CHARS"]`` (the checkpoint keeps the message whole)."""
    text = text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    limit = conf.MAX_TURN_CHARS
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _message_fields(message: Any) -> tuple[str | None, str | None, str, list[Any]]:
    """``(id, role, text, tool calls)`` of a LangChain message or a message dict; role ``None`` for
    what is not a conversation message."""
    if isinstance(message, BaseMessage):
        kind = message.type
        if kind == "chat":
            kind = str(getattr(message, "role", ""))
        calls = list(getattr(message, "tool_calls", None) or [])
        return message.id, MESSAGE_ROLES.get(kind), message.text, calls
    if isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(
                part.get("text", "") if isinstance(part, dict) else str(part) for part in content
            )
        ident = message.get("id")
        return (
            ident if isinstance(ident, str) else None,
            MESSAGE_ROLES.get(str(message.get("role") or message.get("type"))),
            content if isinstance(content, str) else "",
            list(message.get("tool_calls") or []),
        )
    return None, None, "", []


def message_identity(message: Any, position: int) -> str:
    """What tells a thread's message from the others: its id, or its position and a text digest."""
    ident, role, text, _ = _message_fields(message)
    if ident:
        return ident
    digest = hashlib.sha256(f"{role}\x00{text}".encode("utf-8", "replace")).hexdigest()[:16]
    return f"#{position}:{digest}"


def turn_from_message(message: Any, *, thread_id: str, identity: str) -> MirrorTurn | None:
    """The turn a thread's message is kept as; ``None`` for what is no conversation message.

    Human, AI, system (or developer) and tool messages become ``user``, ``assistant``, ``system``
    and ``tool`` turns of the message's text (an AI message that only calls tools:
    ``name(arguments)`` per call), cut to ``MEMORY["MAX_TURN_CHARS"]``. Its idempotency key is
    stable per thread and message, so a replay stores it once.
    """
    _, role, text, calls = _message_fields(message)
    if role is None:
        return None
    if not text.strip() and calls:
        text = "\n".join(
            f"{call.get('name')}({json.dumps(call.get('args'), ensure_ascii=False)})"
            for call in calls
            if isinstance(call, dict)
        )
    key = hashlib.sha256(f"{thread_id}\x00{identity}".encode("utf-8", "replace")).hexdigest()
    kept: dict[str, Any] = {"message_id": identity}
    if calls:
        kept["tool_calls"] = _json_safe(calls)
    return MirrorTurn(
        key=TURN_KEY_PREFIX + key,
        role=role,
        content=_clean_text(text or f"[{role}]"),
        metadata={"langgraph": kept},
    )


class MemoryCheckpointSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer of one memory owner, on the app's database, sync and async
    (``graph.compile(checkpointer=MemoryCheckpointSaver(owner_id=...))``).

    The owner is the saver's, never the run's config: a ``thread_id`` names one of that owner's
    sessions. Each root checkpoint mirrors the new messages of ``messages_channel`` (``None``: off)
    as the owner's turns, in the checkpoint's transaction, once each; deleting checkpoints keeps
    them. Implements LangGraph's saver methods and their async twins, ``prune`` included (do not
    prune threads with a ``DeltaChannel``; docs/agents.md). Raises ``ValidationError`` for a bad
    thread or owner id, ``MemoryUnavailable`` when the database cannot be reached (then nothing was
    stored).
    """

    def __init__(
        self,
        *,
        owner_id: str,
        serde: SerializerProtocol | None = None,
        messages_channel: str | None = "messages",
    ) -> None:
        try:
            validate_owner_id(owner_id)
        except ValidationError as e:
            raise ValidationError({"user_id": e.messages}) from e
        super().__init__(serde=serde)
        self.owner_id = owner_id
        self.messages_channel = messages_channel

    def __repr__(self) -> str:
        return f"MemoryCheckpointSaver(owner_id={self.owner_id!r})"

    def _address(self, config: RunnableConfig) -> ThreadAddress:
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if thread_id is None:
            raise ValidationError({"thread_id": ["A checkpointer's config names a thread_id."]})
        return ThreadAddress(
            self.owner_id, str(thread_id), str(configurable.get("checkpoint_ns") or "")
        )

    def _tuple(self, record: checkpoint_reads.CheckpointRecord) -> CheckpointTuple:
        checkpoint = self.serde.loads_typed((record.type, record.checkpoint))
        checkpoint["channel_values"] = {
            channel: self.serde.loads_typed((kind, blob or b""))
            for channel, kind, blob in record.blobs
            if kind != "empty"
        }
        address = {"thread_id": record.thread_id, "checkpoint_ns": record.checkpoint_ns}
        parent = None
        if record.parent_checkpoint_id is not None:
            parent = {"configurable": {**address, "checkpoint_id": record.parent_checkpoint_id}}
        return CheckpointTuple(
            config={"configurable": {**address, "checkpoint_id": record.checkpoint_id}},
            checkpoint=checkpoint,
            metadata=record.metadata,  # type: ignore[arg-type]
            parent_config=parent,  # type: ignore[arg-type]
            pending_writes=[
                (task_id, channel, self.serde.loads_typed((kind, blob)))
                for task_id, channel, kind, blob, _ in record.writes
            ],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        address = self._address(config)
        try:
            validate_session_id(address.thread_id)
        except ValidationError:
            return None
        with thread_connection():
            record = checkpoint_reads.checkpoint_get(
                owner_id=self.owner_id,
                thread_id=address.thread_id,
                checkpoint_ns=address.checkpoint_ns,
                checkpoint_id=get_checkpoint_id(config),
            )
        return self._tuple(record) if record is not None else None

    def _list_page(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
        offset: int,
    ) -> list[CheckpointTuple]:
        configurable = (config or {}).get("configurable") or {}
        thread_id = configurable.get("thread_id")
        ns = configurable.get("checkpoint_ns")
        with thread_connection():
            records = list(
                checkpoint_reads.checkpoint_list(
                    owner_id=self.owner_id,
                    thread_id=str(thread_id) if thread_id is not None else None,
                    checkpoint_ns=str(ns) if ns is not None else None,
                    checkpoint_id=configurable.get("checkpoint_id"),
                    metadata=_json_safe(filter) if filter else None,
                    before=get_checkpoint_id(before) if before else None,
                    limit=limit,
                    offset=offset,
                )
            )
        return [self._tuple(record) for record in records]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        for size, offset in _pages(limit):
            page = self._list_page(config, filter, before, size, offset)
            yield from page
            if len(page) < size:
                return

    def _turns(
        self,
        address: ThreadAddress,
        parent_id: str | None,
        values: dict[str, Any],
        new_versions: ChannelVersions,
    ) -> builtins.list[MirrorTurn]:
        channel = self.messages_channel
        if channel is None or address.checkpoint_ns or channel not in new_versions:
            return []
        messages = values.get(channel)
        if not isinstance(messages, list):
            return []
        held: set[str] = set()
        if parent_id is not None:
            found = checkpoint_reads.checkpoint_channel_get(
                owner_id=self.owner_id,
                thread_id=address.thread_id,
                checkpoint_ns=address.checkpoint_ns,
                checkpoint_id=parent_id,
                channel=channel,
            )
            if found is not None and found[0] != "empty":
                before = self.serde.loads_typed((found[0], found[1] or b""))
                if isinstance(before, list):
                    held = {message_identity(m, i) for i, m in enumerate(before)}
        turns = []
        for position, message in enumerate(messages):
            identity = message_identity(message, position)
            if identity in held:
                continue
            turn = turn_from_message(message, thread_id=address.thread_id, identity=identity)
            if turn is not None:
                turns.append(turn)
        return turns

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        address = self._address(config)
        parent_id = get_checkpoint_id(config)
        stored = dict(checkpoint)
        values: dict[str, Any] = stored.pop("channel_values", None) or {}  # type: ignore[assignment]
        kind, data = self.serde.dumps_typed(stored)
        blobs = [
            BlobInput(channel, str(version), *self.serde.dumps_typed(values[channel]))
            if channel in values
            else BlobInput(channel, str(version), "empty", None)
            for channel, version in new_versions.items()
        ]
        with thread_connection():
            checkpoint_writes.checkpoint_put(
                address=address,
                checkpoint_id=checkpoint["id"],
                parent_checkpoint_id=parent_id,
                type=kind,
                checkpoint=data,
                metadata=_json_safe(get_serializable_checkpoint_metadata(config, metadata)),
                channel_versions={
                    channel: str(version)
                    for channel, version in checkpoint["channel_versions"].items()
                },
                blobs=blobs,
                turns=self._turns(address, parent_id, values, new_versions),
            )
        return {
            "configurable": {
                "thread_id": address.thread_id,
                "checkpoint_ns": address.checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        address = self._address(config)
        rows = [
            WriteInput(WRITES_IDX_MAP.get(channel, idx), channel, *self.serde.dumps_typed(value))
            for idx, (channel, value) in enumerate(writes)
        ]
        with thread_connection():
            checkpoint_writes.checkpoint_writes_put(
                address=address,
                checkpoint_id=str(config["configurable"]["checkpoint_id"]),
                task_id=task_id,
                task_path=task_path,
                writes=rows,
                replace=all(channel in WRITES_IDX_MAP for channel, _ in writes),
            )

    def delete_thread(self, thread_id: str) -> None:
        with thread_connection():
            checkpoint_writes.checkpoint_threads_delete(
                owner_id=self.owner_id, thread_ids=[str(thread_id)]
            )

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        with thread_connection():
            checkpoint_writes.checkpoint_runs_delete(
                owner_id=self.owner_id, run_ids=[str(run_id) for run_id in run_ids]
            )

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        with thread_connection():
            checkpoint_writes.checkpoint_thread_copy(
                owner_id=self.owner_id,
                source_thread_id=str(source_thread_id),
                target_thread_id=str(target_thread_id),
            )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"Unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'.")
        with thread_connection():
            checkpoint_writes.checkpoint_threads_prune(
                owner_id=self.owner_id,
                thread_ids=[str(thread_id) for thread_id in thread_ids],
                keep_latest=strategy == "keep_latest",
            )

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """The version after ``current``: a zero-padded counter and a random fraction, as
        LangGraph's own savers make them."""
        if current is None:
            number = 0
        elif isinstance(current, (int, float)):
            number = int(current)
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # The async twins: each runs its sync method in Django's thread for sync code.
    aget_tuple = aio.twin_method(get_tuple)
    alist = aio.twin_iter_method(list, batch=ALIST_PAGE)
    aput = aio.twin_method(put)
    aput_writes = aio.twin_method(put_writes)
    adelete_thread = aio.twin_method(delete_thread)
    adelete_for_runs = aio.twin_method(delete_for_runs)
    acopy_thread = aio.twin_method(copy_thread)
    aprune = aio.twin_method(prune)


__all__ = ["MemoryCheckpointSaver", "message_identity", "turn_from_message"]
