"""The Django admin of the memory app: read-mostly pages for owners, sessions, turns and facts.

Every change goes through ``memory.services``, so the Redis copy never serves what the admin
changed; inlines, filters and counts are bounded whatever an owner's size. Every page needs
``memory.access_all_memories`` (``is_staff`` alone grants nothing), then the model permission of the
action (view, change, delete).
"""

from __future__ import annotations

# NOTE: imported for their ``@admin.register``: Django's autodiscovery imports this package.
from memory.admin import facts, owners, turns  # noqa: F401
