"""The Django admin of the memory app: read-mostly pages for owners, sessions, turns and facts.

Every change goes through ``memory.services``, so the Redis copy never serves what the admin
changed or deleted. Inlines, filters and counts are bounded: an owner with 100,000 turns costs
the same queries as one with ten.

Who may do what agrees with the API: every page needs ``memory.access_all_memories`` (the
permission that makes a service caller; ``is_staff`` alone grants nothing), and then the
model permission of the action: view, change (fact edits, dropping a cached copy) or delete
(deleting facts and turns, forgetting owners).
"""

from __future__ import annotations

# NOTE: imported for their ``@admin.register``: Django's autodiscovery imports this package.
from memory.admin import facts, owners, turns  # noqa: F401
