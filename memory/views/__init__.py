"""The HTTP API: one thin ``APIView`` per URL over the services and selectors, one module per
entity, and in ``base`` the base view with its mapping of domain and database errors to statuses.
Views hand the selectors' dicts to ``Response`` as they are; output serializers only describe
them."""

from __future__ import annotations

from memory.views.base import (
    READ_ERRORS,
    USER_ID,
    WRITE_ERRORS,
    JSONParser,
    JSONRenderer,
    MemorySchema,
    MemoryView,
    api_exception,
    not_found,
)
from memory.views.context import ContextMessagesView, ContextView, SummaryView
from memory.views.export import ExportView
from memory.views.facts import FactHistoryView, FactsView, FactView
from memory.views.turns import SearchView, TurnsView
from memory.views.users import HealthView, LinkView, SessionsView, UserView

__all__ = [
    "READ_ERRORS",
    "USER_ID",
    "WRITE_ERRORS",
    "ContextMessagesView",
    "ContextView",
    "ExportView",
    "FactHistoryView",
    "FactView",
    "FactsView",
    "HealthView",
    "JSONParser",
    "JSONRenderer",
    "LinkView",
    "MemorySchema",
    "MemoryView",
    "SearchView",
    "SessionsView",
    "SummaryView",
    "TurnsView",
    "UserView",
    "api_exception",
    "not_found",
]
