"""URLs of the memory API; the host mounts them (the demo at ``/api/memory/``).

Owner ids and fact keys are matched by path converters that hold the contract's rules, so a
malformed one never reaches a view: it is a JSON 404, as the contract allows.
"""

from __future__ import annotations

from django.urls import URLPattern, path, re_path, register_converter

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

app_name = "memory"
urlpatterns: list[URLPattern] = [
    path("users/<owner:user_id>/", users.UserView.as_view(), name="user"),
    path("users/<owner:user_id>/turns/", turns.TurnsView.as_view(), name="turns"),
    path("users/<owner:user_id>/context/", context.ContextView.as_view(), name="context"),
    path(
        "users/<owner:user_id>/context/messages/",
        context.ContextMessagesView.as_view(),
        name="context-messages",
    ),
    path("users/<owner:user_id>/facts/", facts.FactsView.as_view(), name="facts"),
    path("users/<owner:user_id>/facts/<fact_key:key>/", facts.FactView.as_view(), name="fact"),
    path(
        "users/<owner:user_id>/facts/<fact_key:key>/history/",
        facts.FactHistoryView.as_view(),
        name="fact-history",
    ),
    path("users/<owner:user_id>/sessions/", users.SessionsView.as_view(), name="sessions"),
    path("users/<owner:user_id>/search/", turns.SearchView.as_view(), name="search"),
    path("users/<owner:user_id>/link/", users.LinkView.as_view(), name="link"),
    path("users/<owner:user_id>/summary/", context.SummaryView.as_view(), name="summary"),
    path("users/<owner:user_id>/export/", export.ExportView.as_view(), name="export"),
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
