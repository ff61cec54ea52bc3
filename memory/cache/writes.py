"""The write side of the protocol: each committed write's cache update, run after its commit,
and the same for writes that bypassed the services (the ORM safety net of memory.signals).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypedDict

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from memory.cache.client import enabled
from memory.cache.copy import copy_apply, copy_drop
from memory.cache.history import history_epoch
from memory.cache.repair import Pending, confirmed, remember, repairer_ensure
from memory.cache.stamps import stamp_get, stamp_take, stamp_take_by_pk
from memory.models import CacheInvalidation, Owner
from memory.payloads import FactPayload, TurnPayload


class Delta(TypedDict):
    """What a write changed that the copy takes as it is."""

    turns: list[TurnPayload]
    facts: list[FactPayload]
    deleted_keys: list[str]


# NOTE: set while a service writes: the ORM safety net leaves the cache to its own update.
_in_service: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "memory_in_service", default=False
)


class service_write:
    """Mark the code inside as a service's write: its cache update is the service's own."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _in_service.set(True)

    def __exit__(self, *exc: object) -> None:
        _in_service.reset(self._token)


def write_commit(
    owner: Owner,
    prev_stamp: int,
    *,
    turns: Sequence[TurnPayload] = (),
    facts: Sequence[FactPayload] = (),
    deleted_keys: Sequence[str] = (),
    drop: bool = False,
    outbox_pk: int | None = None,
    db: BaseDatabaseWrapper | None = None,
) -> None:
    """After the current transaction commits, bring the owner's copy from ``prev_stamp`` to its new
    stamp with this delta (or ``drop`` it), then clear the dirty mark (or the ``outbox_pk`` row); if
    Redis does not confirm, have it repaired.

    Call inside the write's transaction, after ``stamp_take``; ``db``: the default database's
    connection, when the caller holds it. Never raises.
    """
    if not enabled():
        return
    repairer_ensure()
    owner_pk, owner_id, stamp = owner.pk, owner.external_id, owner.stamp
    delta: Delta = {
        "turns": list(turns),
        "facts": list(facts),
        "deleted_keys": list(deleted_keys),
    }

    def update() -> None:
        epoch = history_epoch()
        if epoch is None:
            ok = False
        elif drop:
            ok = copy_drop(owner_id=owner_id, stamp=stamp, epoch=epoch)
        else:
            ok = copy_apply(
                owner_id=owner_id, prev_stamp=prev_stamp, stamp=stamp, epoch=epoch, **delta
            )
        if ok:
            confirmed(owner_pk=owner_pk, stamp=stamp, outbox_pk=outbox_pk)
        else:
            remember(
                Pending(owner_pk=owner_pk, owner_id=owner_id, stamp=stamp, outbox_pk=outbox_pk)
            )

    if db is None:
        transaction.on_commit(update, robust=True)
    else:
        db.on_commit(update, robust=True)


class OwnerWrite:
    """What one write of an owner changed, for its cache update (see ``owner_write``)."""

    __slots__ = ("_delta", "_drop", "_outbox_pk")

    def __init__(self) -> None:
        self._delta: Delta | None = None
        self._drop = False
        self._outbox_pk: int | None = None

    def delta(
        self,
        *,
        turns: Sequence[TurnPayload] = (),
        facts: Sequence[FactPayload] = (),
        deleted_keys: Sequence[str] = (),
    ) -> None:
        """The write appended ``turns``, wrote ``facts`` and deleted ``deleted_keys``; deltas add
        up."""
        delta: Delta = self._delta or {"turns": [], "facts": [], "deleted_keys": []}
        delta["turns"] += turns
        delta["facts"] += facts
        delta["deleted_keys"] += deleted_keys
        self._delta = delta

    def drop(self, *, outbox_pk: int | None = None) -> None:
        """The copy goes (and, with ``outbox_pk``, that ``CacheInvalidation`` row once Redis
        confirmed); a drop outweighs any delta."""
        self._drop = True
        self._outbox_pk = outbox_pk


@contextmanager
def owner_write(
    owner: Owner, *, turns: int = 0, stamp_taken: int | None = None
) -> Iterator[OwnerWrite]:
    """Write the memory of ``owner`` (locked, in its write's transaction) inside this block.

    On entry the owner gets its new stamp, with ``turns`` seqs reserved (a database function that
    took the stamp itself passes the previous one as ``stamp_taken``). After commit the copy takes
    the delta stated with ``write.delta(...)``, else (nothing stated, ``drop()``, an exception) it
    is dropped. A rolled-back write never reaches Redis.
    """
    prev = stamp_take(owner, turns=turns) if stamp_taken is None else stamp_taken
    write = OwnerWrite()
    try:
        yield write
    except BaseException:
        write_commit(owner, 0, drop=True)
        raise
    if write._drop or write._delta is None:
        write_commit(owner, 0, drop=True, outbox_pk=write._outbox_pk)
    else:
        write_commit(owner, prev, **write._delta)


def owner_changed(
    owner: Owner,
    *,
    turns: Sequence[TurnPayload] = (),
    facts: Sequence[FactPayload] = (),
    deleted_keys: Sequence[str] = (),
    stamp_taken: int | None = None,
    db: BaseDatabaseWrapper | None = None,
) -> None:
    """``owner_write`` in one call, for a change already made in the transaction (``db``: the
    default database's connection, when the caller holds it)."""
    prev = stamp_take(owner) if stamp_taken is None else stamp_taken
    write_commit(owner, prev, turns=turns, facts=facts, deleted_keys=deleted_keys, db=db)


def owner_drop(owner: Owner, *, turns: int = 0, outbox_pk: int | None = None) -> None:
    """``owner_write`` of a change the copy cannot take as a delta (turns moved or deleted): a new
    stamp now, a drop after commit."""
    with owner_write(owner, turns=turns) as write:
        write.drop(outbox_pk=outbox_pk)


def owner_invalidate(owner_id: str) -> bool:
    """Drop the owner's copy now, at its stamp in the database, so that the next read
    rehydrates (after raw SQL or ``QuerySet.update()``, which no signal sees); return whether
    Redis confirmed. Never raises."""
    epoch = history_epoch()
    return epoch is not None and copy_drop(
        owner_id=owner_id, stamp=stamp_get(owner_id), epoch=epoch
    )


def orm_write(owner_pk: int) -> None:
    """A turn or fact was written through the ORM, not a service: give the owner a new stamp and a
    dirty mark in the same transaction, and drop its copy after commit.

    Does nothing inside a service or without a cache. In autocommit the mark follows the write's own
    statement.
    """
    owner = _orm_stamp(owner_pk)
    if owner is not None:
        write_commit(owner, 0, drop=True)


def _orm_stamp(owner_pk: int) -> Owner | None:
    """The owner at its new stamp, outside a service and with a cache; else ``None``."""
    if _in_service.get() or not enabled():
        return None
    row = stamp_take_by_pk(owner_pk)
    if row is None:
        return None
    owner_id, stamp = row
    return Owner(pk=owner_pk, external_id=owner_id, stamp=stamp)


@contextmanager
def orm_delete(owner_pks: Callable[[], Iterable[int]]) -> Iterator[None]:
    """Around an ORM delete of turns: ``orm_write`` for each owner ``owner_pks()`` names, in one
    transaction with the delete, in pk order (a service's lock order). Does nothing inside a
    service or without a cache.
    """
    if _in_service.get() or not enabled():
        yield
        return
    with transaction.atomic():
        for owner_pk in sorted(set(owner_pks())):
            orm_write(owner_pk)
        yield


def orm_forget(owner_pk: int) -> None:
    """An owner is being deleted through the ORM: as ``memory_forget`` does, a new stamp and a
    ``CacheInvalidation`` row in the delete's transaction, a drop after commit. Does nothing inside
    a service or without a cache."""
    owner = _orm_stamp(owner_pk)
    if owner is not None:
        pending = CacheInvalidation.objects.create(external_id=owner.external_id, stamp=owner.stamp)
        write_commit(owner, 0, drop=True, outbox_pk=pending.pk)
