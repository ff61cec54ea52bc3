"""Writes of an owner's LangGraph threads (the checkpointer of ``memory.integrations.langgraph``):
checkpoints, channel values, pending writes, and the thread's messages mirrored as turns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from django.db.models import Q
from django.utils import timezone

from memory import aio
from memory.models import (
    CHECKPOINT_WRITE_KEY,
    Checkpoint,
    CheckpointBlob,
    CheckpointWrite,
    Owner,
    Turn,
)
from memory.services.common import field_check, owner_lock, service_transaction
from memory.services.turns import turn_append
from memory.validators import validate_owner_id, validate_session_id

# Rows a copy or a prune reads per query.
PAGE_ROWS = 500


class ThreadAddress(NamedTuple):
    """Where a checkpoint lives: an owner's thread (one of its sessions) and a namespace."""

    owner_id: str
    thread_id: str
    checkpoint_ns: str


class BlobInput(NamedTuple):
    """One channel's value at one version, serialized: ``blob`` ``None`` for no value."""

    channel: str
    version: str
    type: str
    blob: bytes | None


class WriteInput(NamedTuple):
    """One pending write of a task, serialized."""

    idx: int
    channel: str
    type: str
    blob: bytes


class MirrorTurn(NamedTuple):
    """A message of the thread to keep as the owner's turn, once (``key``: its idempotency key)."""

    key: str
    role: str
    content: str
    metadata: dict[str, Any]


def _owner_row(owner_id: str) -> Owner:
    """The owner's row, created if need be; not locked (the cache copies no checkpoint)."""
    return Owner.objects.get_or_create(external_id=owner_id)[0]


def _address_check(address: ThreadAddress) -> None:
    field_check("user_id", validate_owner_id, address.owner_id)
    field_check("thread_id", validate_session_id, address.thread_id)


def checkpoint_put(
    *,
    address: ThreadAddress,
    checkpoint_id: str,
    parent_checkpoint_id: str | None,
    type: str,
    checkpoint: bytes,
    metadata: dict[str, Any],
    channel_versions: dict[str, str],
    blobs: Sequence[BlobInput],
    turns: Sequence[MirrorTurn] = (),
) -> None:
    """Store a checkpoint of the owner's thread with the channel values it changed, and append the
    ``turns`` the owner does not hold yet (by key) to the session ``thread_id``; one transaction.

    A checkpoint put again replaces the stored one; a blob stored at its version is kept. Raises
    ``ValidationError`` for a bad owner id, thread id (a session id) or turn, ``MemoryUnavailable``
    when the database cannot be reached.
    """
    _address_check(address)
    with service_transaction():
        owner = _owner_row(address.owner_id)
        where: dict[str, Any] = {
            "owner": owner,
            "thread_id": address.thread_id,
            "checkpoint_ns": address.checkpoint_ns,
        }
        Checkpoint.objects.update_or_create(
            **where,
            checkpoint_id=checkpoint_id,
            defaults={
                "parent_checkpoint_id": parent_checkpoint_id,
                "type": type,
                "checkpoint": checkpoint,
                "metadata": metadata,
                "channel_versions": channel_versions,
                "created_at": timezone.now(),
            },
        )
        if blobs:
            CheckpointBlob.objects.bulk_create(
                [
                    CheckpointBlob(
                        **where, channel=b.channel, version=b.version, type=b.type, blob=b.blob
                    )
                    for b in blobs
                ],
                ignore_conflicts=True,
            )
        if turns:
            held = set(
                Turn.objects.filter(
                    owner=owner, idempotency_key__in=[t.key for t in turns]
                ).values_list("idempotency_key", flat=True)
            )
            for turn in turns:
                if turn.key in held:
                    continue
                held.add(turn.key)
                turn_append(
                    owner_id=address.owner_id,
                    session_id=address.thread_id,
                    role=turn.role,
                    content=turn.content,
                    metadata=turn.metadata,
                    idempotency_key=turn.key,
                )


acheckpoint_put = aio.twin(checkpoint_put)


def checkpoint_writes_put(
    *,
    address: ThreadAddress,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    writes: Sequence[WriteInput],
    replace: bool,
) -> None:
    """Store a task's pending writes to a checkpoint, keyed by ``(task_id, idx)``; with ``replace``
    a stored write is replaced, else kept. Errors as ``checkpoint_put``'s."""
    _address_check(address)
    if not writes:
        return
    with service_transaction():
        owner = _owner_row(address.owner_id)
        rows = [
            CheckpointWrite(
                owner=owner,
                thread_id=address.thread_id,
                checkpoint_ns=address.checkpoint_ns,
                checkpoint_id=checkpoint_id,
                task_id=task_id,
                task_path=task_path,
                idx=w.idx,
                channel=w.channel,
                type=w.type,
                blob=w.blob,
            )
            for w in writes
        ]
        if replace:
            CheckpointWrite.objects.bulk_create(
                rows,
                update_conflicts=True,
                unique_fields=CHECKPOINT_WRITE_KEY,
                update_fields=["channel", "type", "blob", "task_path"],
            )
        else:
            CheckpointWrite.objects.bulk_create(rows, ignore_conflicts=True)


acheckpoint_writes_put = aio.twin(checkpoint_writes_put)


def _owner(owner_id: str) -> Owner | None:
    field_check("user_id", validate_owner_id, owner_id)
    return owner_lock(owner_id, create=False)


def _threads_delete(owner: Owner, threads: Q) -> None:
    for model in (Checkpoint, CheckpointBlob, CheckpointWrite):
        model.objects.filter(threads, owner=owner).delete()


def checkpoint_threads_delete(*, owner_id: str, thread_ids: Sequence[str]) -> None:
    """Delete every checkpoint, channel value and pending write of the owner's threads (mirrored
    turns stay). Raises ``ValidationError`` for a bad owner id, ``MemoryUnavailable`` when the
    database cannot be reached."""
    with service_transaction():
        owner = _owner(owner_id)
        if owner is not None and thread_ids:
            _threads_delete(owner, Q(thread_id__in=list(thread_ids)))


acheckpoint_threads_delete = aio.twin(checkpoint_threads_delete)


def checkpoint_runs_delete(*, owner_id: str, run_ids: Sequence[str]) -> None:
    """Delete the owner's checkpoints whose metadata names one of ``run_ids``, with their
    pending writes. Errors as ``checkpoint_threads_delete``'s."""
    with service_transaction():
        owner = _owner(owner_id)
        if owner is None or not run_ids:
            return
        gone = Checkpoint.objects.filter(owner=owner, metadata__run_id__in=list(run_ids))
        keys = list(gone.values_list("thread_id", "checkpoint_ns", "checkpoint_id"))
        gone.delete()
        for thread_id, ns, checkpoint_id in keys:
            CheckpointWrite.objects.filter(
                owner=owner, thread_id=thread_id, checkpoint_ns=ns, checkpoint_id=checkpoint_id
            ).delete()


acheckpoint_runs_delete = aio.twin(checkpoint_runs_delete)


def checkpoint_threads_prune(
    *, owner_id: str, thread_ids: Sequence[str], keep_latest: bool
) -> None:
    """Delete the owner's threads' checkpoints but, with ``keep_latest``, the newest of each
    namespace (with its channel values and pending writes); without it, everything, as
    ``checkpoint_threads_delete``. Errors as ``checkpoint_threads_delete``'s."""
    with service_transaction():
        owner = _owner(owner_id)
        if owner is None or not thread_ids:
            return
        if not keep_latest:
            _threads_delete(owner, Q(thread_id__in=list(thread_ids)))
            return
        for thread_id in dict.fromkeys(thread_ids):
            rows = Checkpoint.objects.filter(owner=owner, thread_id=thread_id)
            for ns in set(rows.values_list("checkpoint_ns", flat=True)):
                kept = rows.filter(checkpoint_ns=ns).order_by("-checkpoint_id").first()
                assert kept is not None
                rows.filter(checkpoint_ns=ns).exclude(pk=kept.pk).delete()
                where = {"owner": owner, "thread_id": thread_id, "checkpoint_ns": ns}
                CheckpointWrite.objects.filter(**where).exclude(
                    checkpoint_id=kept.checkpoint_id
                ).delete()
                used = set(kept.channel_versions.items())
                stale = [
                    pk
                    for pk, channel, version in CheckpointBlob.objects.filter(**where)
                    .values_list("pk", "channel", "version")
                    .iterator(chunk_size=PAGE_ROWS)
                    if (channel, version) not in used
                ]
                CheckpointBlob.objects.filter(pk__in=stale).delete()


acheckpoint_threads_prune = aio.twin(checkpoint_threads_prune)


def checkpoint_thread_copy(*, owner_id: str, source_thread_id: str, target_thread_id: str) -> None:
    """Copy every checkpoint, channel value and pending write of the owner's thread
    ``source_thread_id`` to its thread ``target_thread_id`` (both the owner's: a thread is
    never copied to another owner). Rows the target holds under the same keys are kept.
    Errors as ``checkpoint_threads_delete``'s, and ``ValidationError`` for a bad thread id."""
    field_check("thread_id", validate_session_id, target_thread_id)
    with service_transaction():
        owner = _owner(owner_id)
        if owner is None:
            return
        for model in (Checkpoint, CheckpointBlob, CheckpointWrite):
            rows: list[Any] = []
            for row in model.objects.filter(owner=owner, thread_id=source_thread_id).iterator(
                chunk_size=PAGE_ROWS
            ):
                row.pk = None
                row.thread_id = target_thread_id
                rows.append(row)
                if len(rows) == PAGE_ROWS:
                    model.objects.bulk_create(rows, ignore_conflicts=True)
                    rows = []
            model.objects.bulk_create(rows, ignore_conflicts=True)


acheckpoint_thread_copy = aio.twin(checkpoint_thread_copy)
