"""Reads of an owner's memory: the app's public Python API for looking at it (exactly the
names of ``__all__``, docs/python-api.md; operators' counts and listings are in ``memory.ops``).

One module per entity (``pages`` holds what every listing shares), re-exported here.
``context_get``, ``fact_list``, ``fact_get`` and ``summary_get`` read through the Redis copy
and rehydrate it from the database on any miss; the other selectors read the database.
A lost database raises ``MemoryUnavailable``; Redis failures are never seen by callers.
"""

from __future__ import annotations

from memory.selectors.context import acontext_get, acontext_messages, context_get, context_messages
from memory.selectors.export import ExportStream, aowner_export, owner_export
from memory.selectors.facts import (
    afact_get,
    afact_history,
    afact_list,
    fact_get,
    fact_history,
    fact_list,
)
from memory.selectors.health import HealthPayload, ahealth_get, health_get
from memory.selectors.owners import aowner_exists, owner_exists
from memory.selectors.pages import Page
from memory.selectors.search import aturn_search, turn_search
from memory.selectors.sessions import asession_list, session_list
from memory.selectors.summaries import asummary_get, summary_get
from memory.selectors.turns import aturn_list, turn_list

__all__ = [
    "ExportStream",
    "HealthPayload",
    "Page",
    "acontext_get",
    "acontext_messages",
    "afact_get",
    "afact_history",
    "afact_list",
    "ahealth_get",
    "aowner_exists",
    "aowner_export",
    "asession_list",
    "asummary_get",
    "aturn_list",
    "aturn_search",
    "context_get",
    "context_messages",
    "fact_get",
    "fact_history",
    "fact_list",
    "health_get",
    "owner_exists",
    "owner_export",
    "session_list",
    "summary_get",
    "turn_list",
    "turn_search",
]
