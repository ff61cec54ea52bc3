"""The write side of the protocol: each committed write's cache update, run after its commit,
and the same for writes that bypassed the services (the ORM safety net of memory.signals).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from django.db import transaction

from memory.cache.client import enabled
from memory.cache.copy import copy_apply, copy_drop
from memory.cache.repair import Pending, confirmed, remember, repairer_ensure
from memory.cache.stamps import stamp_take_by_pk
from memory.models import CacheInvalidation, Owner
from memory.payloads import FactPayload, TurnPayload

# NOTE: set while a service writes, so that the ORM safety net leaves the cache to the
# service's own update (which knows the delta and costs no extra statement).
_in_service: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "memory_in_service", default=False
)


@contextmanager
def service_write() -> Iterator[None]:
    """Mark the code inside as a service's write: its cache update is the service's own."""
    token = _in_service.set(True)
    try:
        yield
    finally:
        _in_service.reset(token)


def write_commit(
    owner: Owner,
    prev_stamp: int,
    *,
    turns: Sequence[TurnPayload] = (),
    facts: Sequence[FactPayload] = (),
    deleted_keys: Sequence[str] = (),
    drop: bool = False,
    outbox_pk: int | None = None,
) -> None:
    """After the current transaction commits, bring the owner's copy from ``prev_stamp`` to
    the owner's new stamp with this delta (or ``drop`` it), then clear the owner's dirty mark
    (or its forget's ``outbox_pk`` row); if Redis does not confirm, have it repaired.

    Call inside the write's transaction, after ``stamp_take``. A rolled-back write never
    reaches Redis. Never raises.
    """
    if not enabled():
        return
    repairer_ensure()
    owner_pk, owner_id, stamp = owner.pk, owner.external_id, owner.stamp
    turn_list, fact_list, deleted = list(turns), list(facts), list(deleted_keys)

    def update() -> None:
        if drop:
            ok = copy_drop(owner_id=owner_id, stamp=stamp)
        else:
            ok = copy_apply(
                owner_id=owner_id,
                prev_stamp=prev_stamp,
                stamp=stamp,
                turns=turn_list,
                facts=fact_list,
                deleted_keys=deleted,
            )
        if ok:
            confirmed(owner_pk=owner_pk, stamp=stamp, outbox_pk=outbox_pk)
        else:
            remember(
                Pending(owner_pk=owner_pk, owner_id=owner_id, stamp=stamp, outbox_pk=outbox_pk)
            )

    transaction.on_commit(update, robust=True)


def orm_write(owner_pk: int) -> None:
    """A turn or fact of the owner was written through the ORM, not a service: give the owner
    a new stamp and a dirty mark in the same transaction, and drop its copy after commit.

    Called by the signal receivers of memory.signals; does nothing inside a service, or
    without a cache. The mark is durable with the write when the write runs in a transaction
    (``transaction.atomic``); in autocommit it follows the write's own statement.
    """
    if _in_service.get() or not enabled():
        return
    row = stamp_take_by_pk(owner_pk)
    if row is None:
        return
    owner_id, stamp = row
    # NOTE: the same after-commit drop as a service's (prev_stamp is moot for a drop).
    write_commit(Owner(pk=owner_pk, external_id=owner_id, stamp=stamp), 0, drop=True)


@contextmanager
def orm_delete(owner_pks: Callable[[], Iterable[int]]) -> Iterator[None]:
    """Around a delete of turns through the ORM, not a service (``Turn.delete``,
    ``TurnQuerySet.delete``): ``orm_write`` for each owner ``owner_pks()`` names, in one
    transaction with the delete, so that each copy is dropped after the delete commits.

    Does nothing inside a service, or without a cache (``owner_pks`` is not even called).
    NOTE: the owners are marked first, in the order of their pks, as a service takes an
    owner's lock before it touches the owner's turns; and in a transaction even in
    autocommit, where an on-commit drop would otherwise run before the delete.
    """
    if _in_service.get() or not enabled():
        yield
        return
    with transaction.atomic():
        for owner_pk in sorted(set(owner_pks())):
            orm_write(owner_pk)
        yield


def orm_forget(owner_pk: int) -> None:
    """An owner is being deleted through the ORM, not ``memory_forget``: give it a new stamp,
    record its pending drop (``CacheInvalidation``, as a forget does: the owner row, and with
    it its dirty mark, goes) in the delete's transaction, and drop its copy after commit.

    Called by the ``pre_delete`` receiver of memory.signals; does nothing inside a service, or
    without a cache.
    """
    if _in_service.get() or not enabled():
        return
    row = stamp_take_by_pk(owner_pk)
    if row is None:
        return
    owner_id, stamp = row
    pending = CacheInvalidation.objects.create(external_id=owner_id, stamp=stamp)
    write_commit(
        Owner(pk=owner_pk, external_id=owner_id, stamp=stamp), 0, drop=True, outbox_pk=pending.pk
    )
