"""Writes to an owner's memory: the app's public Python API for changing it.

Every service runs in one transaction under the owner's row lock and updates the Redis copy only
after commit. A write that raises stored nothing; a Redis failure never fails a write
(``memory.cache`` states the protocol). One module per thing written; ``deferred`` holds the
django-tasks tasks, imported only when one is due.
"""

from __future__ import annotations

from memory.services.embeddings import aturns_embed, turns_embed
from memory.services.expiry import afacts_expire, facts_expire
from memory.services.facts import (
    afact_delete,
    afact_dot_keys_rename,
    afact_put,
    afacts_merge,
    fact_delete,
    fact_dot_keys_rename,
    fact_put,
    facts_merge,
)
from memory.services.imports import ImportResult, amemory_import, memory_import
from memory.services.owners import (
    LinkResult,
    acache_drop,
    amemory_forget,
    amemory_link,
    aowners_forget_idle,
    cache_drop,
    memory_forget,
    memory_link,
    owners_forget_idle,
)
from memory.services.summaries import asummary_refresh, summary_refresh
from memory.services.turn_facts import aturn_facts_extract, turn_facts_extract
from memory.services.turns import (
    aturn_append,
    aturn_delete,
    aturns_prune,
    turn_append,
    turn_delete,
    turns_prune,
)

__all__ = [
    "ImportResult",
    "LinkResult",
    "acache_drop",
    "afact_delete",
    "afact_dot_keys_rename",
    "afact_put",
    "afacts_expire",
    "afacts_merge",
    "amemory_forget",
    "amemory_import",
    "amemory_link",
    "aowners_forget_idle",
    "asummary_refresh",
    "aturn_append",
    "aturn_delete",
    "aturn_facts_extract",
    "aturns_embed",
    "aturns_prune",
    "cache_drop",
    "fact_delete",
    "fact_dot_keys_rename",
    "fact_put",
    "facts_expire",
    "facts_merge",
    "memory_forget",
    "memory_import",
    "memory_link",
    "owners_forget_idle",
    "summary_refresh",
    "turn_append",
    "turn_delete",
    "turn_facts_extract",
    "turns_embed",
    "turns_prune",
]
