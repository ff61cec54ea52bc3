"""Operators' helpers: the jobs and counts that the management commands, the admin, the
metrics view and a site's scheduled jobs call, beside the public API of ``memory.services``
and ``memory.selectors`` (docs/python-api.md).

No stability promise: a name here may change or go in any release. Each is a service (a
write, with a service's contract) or a selector (a read), and has its async twin.
"""

from __future__ import annotations

from memory.selectors.facts import afact_dot_key_list, fact_dot_key_list
from memory.selectors.owners import (
    OwnerSummary,
    OwnerUsage,
    StatsPayload,
    aowner_dirty_count,
    aowner_id_iter,
    aowner_recent_list,
    aowner_summary_get,
    aowner_usage_get,
    aowners_idle_count,
    astats_get,
    owner_dirty_count,
    owner_id_iter,
    owner_recent_list,
    owner_summary_get,
    owner_usage_get,
    owners_idle_count,
    stats_get,
)
from memory.selectors.search import aturn_search_queryset, turn_search_queryset
from memory.services.embeddings import aturns_embed, turns_embed
from memory.services.expiry import afacts_expire, facts_expire
from memory.services.facts import afact_dot_keys_rename, fact_dot_keys_rename
from memory.services.owners import acache_drop, aowners_forget_idle, cache_drop, owners_forget_idle
from memory.services.summaries import asummary_refresh, summary_refresh
from memory.services.turn_facts import aturn_facts_extract, turn_facts_extract
from memory.services.turns import aturns_prune, turns_prune

__all__ = [
    "OwnerSummary",
    "OwnerUsage",
    "StatsPayload",
    "acache_drop",
    "afact_dot_key_list",
    "afact_dot_keys_rename",
    "afacts_expire",
    "aowner_dirty_count",
    "aowner_id_iter",
    "aowner_recent_list",
    "aowner_summary_get",
    "aowner_usage_get",
    "aowners_forget_idle",
    "aowners_idle_count",
    "astats_get",
    "asummary_refresh",
    "aturn_facts_extract",
    "aturn_search_queryset",
    "aturns_embed",
    "aturns_prune",
    "cache_drop",
    "fact_dot_key_list",
    "fact_dot_keys_rename",
    "facts_expire",
    "owner_dirty_count",
    "owner_id_iter",
    "owner_recent_list",
    "owner_summary_get",
    "owner_usage_get",
    "owners_forget_idle",
    "owners_idle_count",
    "stats_get",
    "summary_refresh",
    "turn_facts_extract",
    "turn_search_queryset",
    "turns_embed",
    "turns_prune",
]
