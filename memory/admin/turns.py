"""The turns' page: read-only (an append-only log), deleting turns through the services."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.views.main import ORDER_VAR
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from memory import ops, services
from memory.admin.base import (
    OwnedAdmin,
    OwnerFilter,
    Refused,
    SessionFilter,
    ViewOnly,
    _json_block,
)
from memory.exceptions import MemoryException
from memory.models import Turn


@admin.register(Turn)
# NOTE: the history is append-only; an operator may only delete a turn (turn_delete).
class TurnAdmin(ViewOnly, OwnedAdmin):
    list_display = ("owner", "seq", "session_id", "role", "content_preview", "created_at")
    list_display_links = ("seq",)
    list_filter = (
        OwnerFilter,
        SessionFilter,
        "role",
        ("created_at", admin.DateFieldListFilter),
    )
    search_fields = ("=owner__external_id",)
    search_help_text = "Exact owner id, or words or Chinese text in the content (best match first)."
    # NOTE: both descending, so that the (owner, seq) unique index serves the whole list too.
    ordering = ("-owner_id", "-seq")
    list_per_page = 50
    fields = (
        "owner_link",
        "seq",
        "session_id",
        "role",
        "content_text",
        "metadata_json",
        "idempotency_key",
        "created_at",
    )
    readonly_fields = fields

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Turn], search_term: str
    ) -> tuple[QuerySet[Turn], bool]:
        by_owner, duplicates = super().get_search_results(request, queryset, search_term)
        if not search_term.strip() or by_owner.exists():
            return by_owner, duplicates
        try:
            matches = ops.turn_search_queryset(q=search_term, queryset=queryset)
        except ValidationError as e:
            self.message_user(request, " ".join(e.messages), messages.WARNING)
            return queryset.none(), False
        if ORDER_VAR in request.GET:
            matches = matches.order_by(*queryset.query.order_by)
        return matches, False

    @admin.display(description="content")
    def content_preview(self, turn: Turn) -> str:
        return Truncator(turn.content).chars(80)

    @admin.display(description="content")
    def content_text(self, turn: Turn) -> SafeString:
        return format_html('<div style="white-space: pre-wrap">{}</div>', turn.content)

    @admin.display(description="metadata")
    def metadata_json(self, turn: Turn) -> SafeString:
        return _json_block(turn.metadata)

    def delete_model(self, request: HttpRequest, obj: Turn) -> None:
        changelist = self._url(Turn, "changelist", owner=obj.owner_id)
        try:
            existed = services.turn_delete(owner_id=obj.owner.external_id, seq=obj.seq)
        except MemoryException as e:
            raise Refused(f"{obj} was not deleted: {e}") from e
        if not existed:
            raise Refused(f"{obj} was already deleted.", redirect_to=changelist)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Turn]) -> None:
        deleted, failed = 0, []
        for owner_id, seq in queryset.values_list("owner__external_id", "seq"):
            try:
                deleted += services.turn_delete(owner_id=owner_id, seq=seq)
            except MemoryException as e:
                failed.append(f"{owner_id}#{seq} ({e})")
        if failed:
            raise Refused(f"Deleted {deleted} turn(s); not deleted: {', '.join(failed)}.")
