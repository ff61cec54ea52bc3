"""The app's own signals, and the cache safety net for ORM writes that bypass the services.

A fact or turn saved, or a fact or owner deleted, through the ORM follows the cache protocol
(``memory.cache.orm_write``); deleted turns are caught by ``Turn.delete`` and
``TurnQuerySet.delete`` instead. ``QuerySet.update()``, ``bulk_create``, ``bulk_update`` and raw
SQL send no signal: write through ``memory.services``, or call ``ops.cache_drop`` after.
"""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save, pre_delete
from django.dispatch import Signal, receiver

from memory import cache
from memory.models import Fact, Owner, Turn

# Sent after an owner was forgotten and the transaction committed.
# args: owner_id (str)
memory_forgotten = Signal()


@receiver(post_save, sender=Fact, dispatch_uid="memory_fact_saved")
@receiver(post_delete, sender=Fact, dispatch_uid="memory_fact_deleted")
@receiver(post_save, sender=Turn, dispatch_uid="memory_turn_saved")
def cache_safety_net(sender: type, instance: Fact | Turn, **kwargs: Any) -> None:
    # NOTE: no post_delete receiver on Turn: it would make Django load every turn of an owner
    # into memory on a forget instead of one DELETE (receivers disable fast deletes).
    cache.orm_write(instance.owner_id)


@receiver(pre_delete, sender=Owner, dispatch_uid="memory_owner_deleted")
def cache_safety_net_forget(sender: type, instance: Owner, **kwargs: Any) -> None:
    # NOTE: a receiver on Owner leaves the fast delete of its turns as it is: Django checks
    # each related model's own receivers for that.
    cache.orm_forget(instance.pk)
