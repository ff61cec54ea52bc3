"""URLs of the memory API; the host mounts them (the demo at ``/api/memory/``).

Each view module declares its owner URLs (``urlpatterns``), mounted here below
``users/<owner:user_id>/``. Owner ids and fact keys are matched by path converters that hold the
contract's rules, so a malformed one never reaches a view: it is a JSON 404, as the contract
allows.
"""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path, re_path, register_converter

from memory.validators import OWNER_ID_RE
from memory.views import context, facts, health, sessions, turns, users
from memory.views import tools as tool_views
from memory.views.base import not_found


class OwnerIdConverter:
    """``<owner:user_id>``: 1-128 letters, digits and ``_ - . @ :``."""

    regex = OWNER_ID_RE.pattern.removeprefix("^").removesuffix("$")

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(OwnerIdConverter, "owner")

app_name = "memory"
urlpatterns: list[URLPattern | URLResolver] = [
    path(
        "users/<owner:user_id>/",
        include(
            [
                *users.urlpatterns,
                *turns.urlpatterns,
                *context.urlpatterns,
                *facts.urlpatterns,
                *sessions.urlpatterns,
                *tool_views.urlpatterns,
            ]
        ),
    ),
    path("tools/", tool_views.ToolsView.as_view(), name="tools"),
    path("health/", health.HealthView.as_view(), name="health"),
    # NOTE: last: anything else under the mount point is a JSON 404, so API clients never get
    # Django's HTML page, and a path without its final slash is a 404, not a redirect.
    re_path(r"", not_found, name="not-found"),
]
