"""Writes to an owner's memory: the app's public Python API for changing it (exactly the
names of ``__all__``, docs/python-api.md; operators' jobs are in ``memory.ops``).

Every service runs in one transaction under the owner's row lock, commits to the database
first, and only then (``transaction.on_commit``) updates the Redis copy. A write that raises
stored nothing; a Redis failure never fails a write (``memory.cache`` states the protocol).
One module per thing written; ``common`` holds what they share, ``deferred`` the django-tasks
tasks (imported only when one is due).
"""

from __future__ import annotations

from memory.services.facts import (
    afact_delete,
    afact_put,
    afacts_merge,
    fact_delete,
    fact_put,
    facts_merge,
)
from memory.services.imports import ImportResult, amemory_import, memory_import
from memory.services.owners import (
    LinkResult,
    amemory_forget,
    amemory_link,
    memory_forget,
    memory_link,
)
from memory.services.turns import aturn_append, aturn_delete, turn_append, turn_delete

__all__ = [
    "ImportResult",
    "LinkResult",
    "afact_delete",
    "afact_put",
    "afacts_merge",
    "amemory_forget",
    "amemory_import",
    "amemory_link",
    "aturn_append",
    "aturn_delete",
    "fact_delete",
    "fact_put",
    "facts_merge",
    "memory_forget",
    "memory_import",
    "memory_link",
    "turn_append",
    "turn_delete",
]
