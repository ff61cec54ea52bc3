"""Reads of an owner's LangGraph threads (the checkpointer of ``memory.integrations.langgraph``):
checkpoints, their channel values and pending writes, as stored bytes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from django.core.exceptions import ValidationError

from memory.exceptions import database_guard
from memory.models import Checkpoint, CheckpointBlob, CheckpointWrite
from memory.validators import validate_owner_id

# Checkpoints a listing reads per query.
LIST_PAGE_ROWS = 100


class CheckpointRecord(NamedTuple):
    """A stored checkpoint: ``blobs`` ``(channel, type, bytes or None)`` of the versions it
    names, ``writes`` ``(task_id, channel, type, bytes, task_path)`` in the order a super-step
    applies them (task path, task id, index)."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type: str
    checkpoint: bytes
    metadata: dict[str, Any]
    blobs: list[tuple[str, str, bytes | None]]
    writes: list[tuple[str, str, str, bytes, str]]


def _owner_check(owner_id: str) -> None:
    try:
        validate_owner_id(owner_id)
    except ValidationError as e:
        raise ValidationError({"user_id": e.messages}) from e


def _record(row: Checkpoint) -> CheckpointRecord:
    where = {
        "owner_id": row.owner_id,
        "thread_id": row.thread_id,
        "checkpoint_ns": row.checkpoint_ns,
    }
    versions = row.channel_versions or {}
    blobs: list[tuple[str, str, bytes | None]] = []
    if versions:
        wanted = set(versions.items())
        blobs = [
            (channel, kind, bytes(blob) if blob is not None else None)
            for channel, version, kind, blob in CheckpointBlob.objects.filter(
                **where, channel__in=list(versions)
            ).values_list("channel", "version", "type", "blob")
            if (channel, version) in wanted
        ]
    writes = [
        (task_id, channel, kind, bytes(blob), task_path)
        for task_id, channel, kind, blob, task_path in CheckpointWrite.objects.filter(
            **where, checkpoint_id=row.checkpoint_id
        )
        .order_by("task_path", "task_id", "idx")
        .values_list("task_id", "channel", "type", "blob", "task_path")
    ]
    return CheckpointRecord(
        row.thread_id,
        row.checkpoint_ns,
        row.checkpoint_id,
        row.parent_checkpoint_id,
        row.type,
        bytes(row.checkpoint),
        row.metadata,
        blobs,
        writes,
    )


def checkpoint_get(
    *, owner_id: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None
) -> CheckpointRecord | None:
    """The owner's checkpoint ``checkpoint_id`` of the thread and namespace, or its newest
    without one; ``None`` when there is none. Raises ``ValidationError`` for a bad owner id,
    ``MemoryUnavailable`` when the database cannot be reached."""
    _owner_check(owner_id)
    with database_guard():
        rows = Checkpoint.objects.filter(
            owner__external_id=owner_id, thread_id=thread_id, checkpoint_ns=checkpoint_ns
        )
        if checkpoint_id is not None:
            rows = rows.filter(checkpoint_id=checkpoint_id)
        row = rows.order_by("-checkpoint_id").first()
        return _record(row) if row is not None else None


def checkpoint_list(
    *,
    owner_id: str,
    thread_id: str | None = None,
    checkpoint_ns: str | None = None,
    checkpoint_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    before: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> Iterator[CheckpointRecord]:
    """The owner's checkpoints, newest first, of one thread, namespace and checkpoint where given,
    whose metadata holds all of ``metadata``, with ids before ``before``, at most ``limit`` after
    ``offset``; read a page at a time. Errors as ``checkpoint_get``'s."""
    _owner_check(owner_id)
    rows = Checkpoint.objects.filter(owner__external_id=owner_id)
    if thread_id is not None:
        rows = rows.filter(thread_id=thread_id)
    if checkpoint_ns is not None:
        rows = rows.filter(checkpoint_ns=checkpoint_ns)
    if checkpoint_id is not None:
        rows = rows.filter(checkpoint_id=checkpoint_id)
    if metadata:
        rows = rows.filter(metadata__contains=dict(metadata))
    if before is not None:
        rows = rows.filter(checkpoint_id__lt=before)
    rows = rows.order_by("-checkpoint_id", "thread_id", "checkpoint_ns")
    rows = rows[offset : offset + limit] if limit is not None else rows[offset:]
    with database_guard():
        for row in rows.iterator(chunk_size=LIST_PAGE_ROWS):
            yield _record(row)


def checkpoint_channel_get(
    *, owner_id: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str, channel: str
) -> tuple[str, bytes | None] | None:
    """The value ``(type, bytes)`` of one channel at the owner's checkpoint; ``None`` when
    the checkpoint or the channel is not there. Errors as ``checkpoint_get``'s."""
    _owner_check(owner_id)
    with database_guard():
        where = {
            "owner__external_id": owner_id,
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
        }
        versions = (
            Checkpoint.objects.filter(**where, checkpoint_id=checkpoint_id)
            .values_list("channel_versions", flat=True)
            .first()
        )
        if not versions or channel not in versions:
            return None
        found = (
            CheckpointBlob.objects.filter(**where, channel=channel, version=versions[channel])
            .values_list("type", "blob")
            .first()
        )
        if found is None:
            return None
        return found[0], bytes(found[1]) if found[1] is not None else None
