"""Reads of an owner's memory: the app's public Python API for looking at it.

One module per entity (``context``, ``facts``, ``turns``, ``sessions``, ``search``, ``owners``,
``health``, ``summaries``, ``export``; ``pages`` holds what every listing shares), everything public
re-exported here. ``context_get``, ``fact_list``, ``fact_get`` and ``summary_get`` read through
the Redis copy and rehydrate it from the database on any miss; the other selectors read the
database.
A lost database raises ``MemoryUnavailable``; Redis failures are never seen by callers.
"""

from __future__ import annotations

from memory.selectors.context import acontext_get, acontext_messages, context_get, context_messages
from memory.selectors.export import (
    EXPORT_FORMAT,
    EXPORT_PAGE_ROWS,
    EXPORT_VERSION,
    ExportStream,
    aowner_export,
    owner_export,
)
from memory.selectors.facts import (
    afact_dot_key_list,
    afact_get,
    afact_history,
    afact_list,
    astore_vectors_get,
    fact_dot_key_list,
    fact_get,
    fact_history,
    fact_list,
    store_vectors_get,
)
from memory.selectors.health import HealthLatency, HealthPayload, ahealth_get, health_get
from memory.selectors.owners import (
    OwnerSummary,
    OwnerUsage,
    StatsPayload,
    aowner_dirty_count,
    aowner_exists,
    aowner_id_iter,
    aowner_recent_list,
    aowner_summary_get,
    aowner_usage_get,
    aowners_idle_count,
    astats_get,
    owner_dirty_count,
    owner_exists,
    owner_id_iter,
    owner_recent_list,
    owner_summary_get,
    owner_usage_get,
    owners_idle_count,
    stats_get,
)
from memory.selectors.pages import DEFAULT_PAGE_SIZE, MAX_CURSOR_CHARS, MAX_PAGE_SIZE, Page
from memory.selectors.search import (
    afacts_similar,
    asearch,
    aturn_search,
    aturn_search_queryset,
    facts_similar,
    turn_search,
    turn_search_queryset,
)
from memory.selectors.sessions import asession_list, session_list
from memory.selectors.summaries import asummary_get, summary_get
from memory.selectors.turns import (
    aowner_last_seq,
    aturn_by_key_get,
    aturn_list,
    aturn_tail,
    owner_last_seq,
    turn_by_key_get,
    turn_list,
    turn_tail,
)

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "EXPORT_FORMAT",
    "EXPORT_PAGE_ROWS",
    "EXPORT_VERSION",
    "MAX_CURSOR_CHARS",
    "MAX_PAGE_SIZE",
    "ExportStream",
    "HealthLatency",
    "HealthPayload",
    "OwnerSummary",
    "OwnerUsage",
    "Page",
    "StatsPayload",
    "acontext_get",
    "acontext_messages",
    "afact_dot_key_list",
    "afact_get",
    "afact_history",
    "afact_list",
    "afacts_similar",
    "ahealth_get",
    "aowner_dirty_count",
    "aowner_exists",
    "aowner_export",
    "aowner_id_iter",
    "aowner_last_seq",
    "aowner_recent_list",
    "aowner_summary_get",
    "aowner_usage_get",
    "aowners_idle_count",
    "asearch",
    "asession_list",
    "astats_get",
    "astore_vectors_get",
    "asummary_get",
    "aturn_by_key_get",
    "aturn_list",
    "aturn_search",
    "aturn_search_queryset",
    "aturn_tail",
    "context_get",
    "context_messages",
    "fact_dot_key_list",
    "fact_get",
    "fact_history",
    "fact_list",
    "facts_similar",
    "health_get",
    "owner_dirty_count",
    "owner_exists",
    "owner_export",
    "owner_id_iter",
    "owner_last_seq",
    "owner_recent_list",
    "owner_summary_get",
    "owner_usage_get",
    "owners_idle_count",
    "session_list",
    "stats_get",
    "store_vectors_get",
    "summary_get",
    "turn_by_key_get",
    "turn_list",
    "turn_search",
    "turn_search_queryset",
    "turn_tail",
]
