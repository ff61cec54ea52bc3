"""The app's own signals, and the cache safety net for writes that bypass the services.

Services update the Redis copy themselves after commit. A fact saved or deleted, or a turn
saved, through the ORM directly (a shell, a data migration) only drops the owner's copy on
commit, so that the next read rehydrates from the database.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import Signal, receiver

from memory import store
from memory.models import Fact, Turn

# Sent after an owner was forgotten and the transaction committed.
# args: owner_id (str)
memory_forgotten = Signal()


def _drop_on_commit(owner_pk: int) -> None:
    from memory.models import Owner
    from memory.services import in_service

    if in_service.get() or not store.enabled():
        return

    def drop() -> None:
        row = Owner.objects.filter(pk=owner_pk).values_list("external_id", "stamp").first()
        if row is not None:
            store.memory_drop(owner_id=row[0], stamp=row[1])

    transaction.on_commit(drop, robust=True)


@receiver(post_save, sender=Fact, dispatch_uid="memory_fact_saved")
@receiver(post_delete, sender=Fact, dispatch_uid="memory_fact_deleted")
@receiver(post_save, sender=Turn, dispatch_uid="memory_turn_saved")
def cache_safety_net(sender: type, instance: Fact | Turn, **kwargs: Any) -> None:
    # NOTE: no post_delete receiver on Turn: it would make Django load every turn of an owner
    # into memory on a forget instead of one DELETE (receivers disable fast deletes).
    _drop_on_commit(instance.owner_id)
