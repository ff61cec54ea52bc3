"""The owners' and sessions' pages: an owner's bounded turns and facts, its summary (read-only),
forgetting owners, dropping a cached copy, exporting an owner's memory and importing one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import orjson
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from memory import ops, permissions, selectors, services
from memory.admin.base import (
    CONFIRM_OWNERS,
    FactsInline,
    LatestTurnsInline,
    MemoryAdmin,
    NoDelete,
    OwnedAdmin,
    OwnerFilter,
    Refused,
    ViewOnly,
    _error_text,
)
from memory.conf import conf
from memory.downloads import export_response
from memory.exceptions import MemoryException
from memory.models import Fact, Owner, Session, Summary, Turn


class ImportForm(forms.Form):
    """The upload of ``OwnerAdmin.import_view``."""

    document = forms.FileField(help_text="The export document (JSON).")
    owner_id = forms.CharField(
        required=False, max_length=128, help_text="Import into this owner id, not the document's."
    )


_F = TypeVar("_F", bound=Callable[..., Any])


def _action(permission: str, description: str) -> Callable[[_F], _F]:
    """An action on the chosen owners, offered where ``has_<permission>_permission`` is true."""
    return admin.action(description=description, permissions=[permission])


@admin.register(Owner)
class OwnerAdmin(ViewOnly, MemoryAdmin):
    list_display = ("external_id", "last_seq", "updated_at", "created_at", "cache_dirty")
    list_filter = (
        "cache_dirty",
        ("updated_at", admin.DateFieldListFilter),
        ("created_at", admin.DateFieldListFilter),
    )
    search_fields = ("external_id",)
    search_help_text = "Owner id (the chat product's user id), or part of it."
    fieldsets = (
        (None, {"fields": ("external_id", "created_at", "updated_at", "browse")}),
        ("Summary", {"fields": ("summary_shown", "summary_due")}),
        ("Cache", {"fields": ("stamp", "cache_dirty")}),
    )
    readonly_fields = (
        "external_id",
        "created_at",
        "updated_at",
        "browse",
        "summary_shown",
        "summary_due",
        "stamp",
        "cache_dirty",
    )
    inlines = (FactsInline, LatestTurnsInline)
    actions = ("forget_owners", "drop_cached_copy", "export_memory")

    # NOTE: the owner's "change" permission, meaningless for a view-only row, grants the
    # harmless cache actions.
    def has_drop_cache_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        return permissions.is_service_caller(request.user) and request.user.has_perm(
            f"{opts.app_label}.change_{opts.model_name}"
        )

    # NOTE: an export hands over a person's whole memory at once, and an import writes one:
    # for service callers (as in the API) trusted with the owner actions, as the cache's.
    def has_export_permission(self, request: HttpRequest) -> bool:
        return self.has_drop_cache_permission(request)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        extra_context = {**(extra_context or {}), "can_import": self.has_export_permission(request)}
        return super().changelist_view(request, extra_context)

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_import"
        view = self.admin_site.admin_view(self.import_view)
        return [path("import/", view, name=name), *super().get_urls()]

    def import_view(self, request: HttpRequest) -> HttpResponse:
        """Upload an export document into an owner with no memory (``services.memory_import``);
        for service callers, as the export."""
        if not self.has_export_permission(request):
            raise PermissionDenied
        form = ImportForm(request.POST or None, request.FILES or None)
        errors: list[str] = []
        if request.method == "POST" and form.is_valid():
            try:
                document = orjson.loads(form.cleaned_data["document"].read())
                result = services.memory_import(
                    document=document, owner_id=form.cleaned_data["owner_id"] or None
                )
            except orjson.JSONDecodeError as e:
                errors = [f"The file is not JSON: {e}"]
            except ValidationError as e:
                errors = [f"{path}: {' '.join(m)}" for path, m in e.message_dict.items()]
            except MemoryException as e:
                errors = [_error_text(e)]
            else:
                self.message_user(
                    request,
                    f"Imported into {result.owner_id}: {result.turns:,} turns, "
                    f"{result.facts:,} facts ({result.fact_versions:,} versions).",
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(self._url(Owner, "changelist"))
        context = {
            **self.admin_site.each_context(request),
            "title": "Import a memory export",
            "opts": self.opts,
            "form": form,
            "errors": errors,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/memory/owner/import_form.html", context)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        # NOTE: "forget" replaces Django's delete, whose confirmation lists every turn.
        actions.pop("delete_selected", None)
        return actions

    @admin.display(description="history")
    def browse(self, owner: Owner) -> SafeString:
        links = [
            (
                self._url(Turn, "changelist", owner=owner.pk),
                f"all turns (latest seq {owner.last_seq})",
            ),
            (self._url(Fact, "changelist", owner=owner.pk), "all facts"),
            (self._url(Session, "changelist", owner=owner.pk), "sessions"),
        ]
        return format_html_join(" · ", '<a href="{}">{}</a>', links)

    @staticmethod
    def _summary(owner: Owner) -> Summary | None:
        """The owner's summary, read once for the page's two fields."""
        if not hasattr(owner, "_admin_summary"):
            owner._admin_summary = Summary.objects.filter(owner=owner).first()  # type: ignore[attr-defined]
        return owner._admin_summary  # type: ignore[attr-defined,no-any-return]

    @admin.display(description="summary")
    def summary_shown(self, owner: Owner) -> SafeString:
        summary = self._summary(owner)
        if summary is None:
            return format_html("<em>{}</em>", "none yet")
        return format_html(
            '<p>Turns 1-{} ({} tokens), updated {}</p><pre style="white-space: pre-wrap">{}</pre>',
            summary.through_seq,
            summary.tokens,
            summary.updated_at.isoformat(timespec="seconds"),
            summary.text,
        )

    @admin.display(description="not summarised yet")
    def summary_due(self, owner: Owner) -> str:
        # NOTE: summary_tokens counts the turns after the summary (every turn before the first
        # one), against the threshold that makes the next refresh due.
        if conf.SUMMARIZER is None:
            return "Summaries are off (MEMORY['SUMMARIZER'] is None)."
        which = "the first summary" if self._summary(owner) is None else "a refresh"
        tokens, after = owner.summary_tokens, conf.SUMMARY_AFTER_TOKENS
        if tokens > after:
            return f"{tokens:,} tokens of turns; {which} is due (the task worker writes it)."
        return (
            f"{tokens:,} tokens of turns; {which} is written once they pass {after:,} "
            "(MEMORY['SUMMARY_AFTER_TOKENS'])."
        )

    def get_deleted_objects(
        self, objs: Iterable[Owner], request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        # NOTE: Django's collector would list every turn (100,000 lines); count them instead.
        deleted: list[Any] = []
        totals = {"turns": 0, "sessions": 0, "facts": 0, "fact versions": 0}
        for owner in objs:
            summary = ops.owner_summary_get(owner_id=owner.external_id)
            if summary is None:
                continue
            counts = {
                "turns": summary["turns"],
                "sessions": summary["sessions"],
                "facts": summary["facts"],
                "fact versions": summary["fact_versions"],
            }
            for name, count in counts.items():
                totals[name] += count
            deleted += [
                format_html("Memory owner: {}", self._owner_link(owner)),
                [f"{count:,} {name}" for name, count in counts.items()],
            ]
        # NOTE: the service deletes the rows, so no permission on them is needed.
        return deleted, totals, set(), []

    def delete_model(self, request: HttpRequest, obj: Owner) -> None:
        # NOTE: the service also deletes the entry Django's delete view has just logged (it
        # names the owner); the forget is then recorded without the id.
        try:
            forgotten = services.memory_forget(owner_id=obj.external_id)
        except (MemoryException, ValidationError) as e:
            raise Refused(f"{obj} was not forgotten: {_error_text(e)}") from e
        self._log_forget(request, int(forgotten))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Owner]) -> None:
        self._forget(request, list(queryset.values_list("external_id", flat=True)))

    def _log_forget(self, request: HttpRequest, count: int) -> None:
        """Record in the admin log that ``count`` owners were forgotten, naming none of them."""
        if count == 0:
            return
        noun = "memory owner" if count == 1 else "memory owners"
        user_id = request.user.pk
        assert user_id is not None  # the admin's pages need a signed-in user
        LogEntry.objects.create(
            user_id=user_id,
            content_type=ContentType.objects.get_for_model(Owner),
            object_id=None,
            object_repr=f"{count} {noun} (ids not kept)",
            action_flag=DELETION,
            change_message=f"Forgot {count} {noun}: turns, facts, sessions and cached copy.",
        )

    def _forget(self, request: HttpRequest, owner_ids: list[str]) -> int:
        forgotten, failed = 0, []
        for owner_id in owner_ids:
            try:
                forgotten += services.memory_forget(owner_id=owner_id)
            except (MemoryException, ValidationError) as e:
                failed.append(f"{owner_id} ({_error_text(e)})")
        self._log_forget(request, forgotten)
        if failed:
            raise Refused(
                f"Forgot {forgotten} owner(s); not forgotten: {', '.join(failed)}.",
                redirect_to=self._url(Owner, "changelist"),
            )
        return forgotten

    @_action("delete", "Forget these owners (turns, facts, sessions, cached copy)")
    def forget_owners(
        self, request: HttpRequest, queryset: QuerySet[Owner]
    ) -> TemplateResponse | None:
        owners = list(queryset.order_by("external_id").values_list("pk", "external_id"))
        if request.POST.get("post") != "yes":
            context = {
                **self.admin_site.each_context(request),
                "title": "Forget these owners?",
                "opts": self.opts,
                "count": len(owners),
                "shown": [owner_id for _, owner_id in owners[:CONFIRM_OWNERS]],
                "more": max(len(owners) - CONFIRM_OWNERS, 0),
                "pks": [pk for pk, _ in owners],
                "action_checkbox_name": ACTION_CHECKBOX_NAME,
            }
            request.current_app = self.admin_site.name
            return TemplateResponse(request, "admin/memory/owner/forget_confirmation.html", context)
        forgotten = self._forget(request, [owner_id for _, owner_id in owners])
        self.message_user(request, f"Forgot {forgotten} owner(s).", messages.SUCCESS)
        return None

    @_action("drop_cache", "Drop the cached copy (the next read rehydrates)")
    def drop_cached_copy(self, request: HttpRequest, queryset: QuerySet[Owner]) -> None:
        if conf.CACHE_ALIAS is None:
            self.message_user(request, "No cache is configured: nothing to drop.", messages.INFO)
            return
        owner_ids = list(queryset.values_list("external_id", flat=True))
        unconfirmed = [owner_id for owner_id in owner_ids if not ops.cache_drop(owner_id=owner_id)]
        dropped = len(owner_ids) - len(unconfirmed)
        if dropped:
            self.message_user(request, f"Dropped the cached copy of {dropped} owner(s).")
        if unconfirmed:
            self.message_user(
                request,
                f"Redis did not confirm for {', '.join(unconfirmed)}; is it down? "
                "Their copies are unchanged.",
                messages.WARNING,
            )

    @_action("export", "Export the memory (a JSON download, one owner at a time)")
    def export_memory(
        self, request: HttpRequest, queryset: QuerySet[Owner]
    ) -> StreamingHttpResponse | None:
        owner_ids = list(queryset.order_by("external_id").values_list("external_id", flat=True)[:2])
        if len(owner_ids) != 1:
            self.message_user(request, "Select one owner to export.", messages.WARNING)
            return None
        try:
            stream = selectors.owner_export(owner_id=owner_ids[0])
        except (MemoryException, ValidationError) as e:
            self.message_user(request, f"Not exported: {_error_text(e)}", messages.ERROR)
            return None
        return export_response(request, owner_ids[0], stream)


@admin.register(Session)
class SessionAdmin(ViewOnly, NoDelete, OwnedAdmin):
    list_display = ("session_id", "owner", "turn_count", "first_seen", "last_seen", "turns")
    list_filter = (OwnerFilter, ("last_seen", admin.DateFieldListFilter))
    search_fields = ("=owner__external_id", "session_id")
    search_help_text = "Exact owner id, or part of a session id."
    ordering = ("-last_seen",)
    fields = ("owner_link", "session_id", "turn_count", "first_seen", "last_seen", "turns")
    readonly_fields = fields
    actions = None

    @admin.display(description="turns")
    def turns(self, session: Session) -> SafeString:
        url = self._url(Turn, "changelist", owner=session.owner_id, session=session.session_id)
        return format_html('<a href="{}">{} turns</a>', url, session.turn_count)
