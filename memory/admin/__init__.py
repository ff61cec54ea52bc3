"""The Django admin of the memory app: read-mostly pages for owners, sessions, turns and facts.

Every change goes through ``memory.services``, so the Redis copy never serves what the admin
changed; inlines, filters and counts are bounded whatever an owner's size. Every page needs
``memory.access_all_memories`` (``is_staff`` alone grants nothing), then the model permission of the
action (view, change, delete).
"""

from __future__ import annotations

from memory.admin.base import MemoryAdmin
from memory.admin.facts import FactAdmin
from memory.admin.owners import OwnerAdmin, SessionAdmin
from memory.admin.turns import TurnAdmin

__all__ = ["FactAdmin", "MemoryAdmin", "OwnerAdmin", "SessionAdmin", "TurnAdmin"]
