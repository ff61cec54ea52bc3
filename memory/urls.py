"""URLs of the memory API; the host mounts them (the demo at ``/api/memory/``).

Owner ids and fact keys are matched by path converters that hold the contract's rules, so a
malformed one never reaches a view: it is a JSON 404, as the contract allows.
"""

from __future__ import annotations

from django.urls import URLPattern, path, re_path, register_converter
from rest_framework.views import APIView

from memory.tools.definitions import TOOLS
from memory.validators import OWNER_ID_RE
from memory.views import context, export, facts, health, turns, users
from memory.views import tools as tool_views
from memory.views.base import not_found


class OwnerIdConverter:
    """``<owner:user_id>``: 1-128 letters, digits and ``_ - . @ :``."""

    regex = OWNER_ID_RE.pattern.removeprefix("^").removesuffix("$")

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class FactKeyConverter:
    """``<fact_key:key>``: 1-64 lower-case letters, digits and ``_ - .``, not only dots."""

    # NOTE: the lookahead ends at the segment's end, so "facts/../" (or %2E%2E) matches no fact URL.
    regex = r"(?!\.+(?![a-z0-9_\-.]))[a-z0-9_\-.]{1,64}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(OwnerIdConverter, "owner")
register_converter(FactKeyConverter, "fact_key")

# The owner's URLs below ``users/<owner:user_id>/``: (the rest of the path, view, name).
_OWNER_ROUTES: list[tuple[str, type[APIView], str]] = [
    ("", users.UserView, "user"),
    ("turns/", turns.TurnsView, "turns"),
    ("context/", context.ContextView, "context"),
    ("context/messages/", context.ContextMessagesView, "context-messages"),
    ("facts/", facts.FactsView, "facts"),
    ("facts/<fact_key:key>/", facts.FactView, "fact"),
    ("facts/<fact_key:key>/history/", facts.FactHistoryView, "fact-history"),
    ("sessions/", users.SessionsView, "sessions"),
    ("search/", turns.SearchView, "search"),
    ("link/", users.LinkView, "link"),
    ("summary/", context.SummaryView, "summary"),
    ("export/", export.ExportView, "export"),
]

app_name = "memory"
urlpatterns: list[URLPattern] = [
    *(
        path(f"users/<owner:user_id>/{route}", view.as_view(), name=name)
        for route, view, name in _OWNER_ROUTES
    ),
    *(path(f"users/<owner:user_id>/tools/{name}/", tool_views.tool_view(name)) for name in TOOLS),
    path(
        "users/<owner:user_id>/tools/<str:name>/",
        tool_views.ToolCallView.as_view(),
        name="tool-call",
    ),
    path("tools/", tool_views.ToolsView.as_view(), name="tools"),
    path("health/", health.HealthView.as_view(), name="health"),
    # NOTE: last: anything else under the mount point is a JSON 404, so API clients never get
    # Django's HTML page, and a path without its final slash is a 404, not a redirect.
    re_path(r"", not_found, name="not-found"),
]
