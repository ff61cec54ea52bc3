"""The Django admin of the memory app: read-mostly pages for owners, sessions, turns and facts.

Every change goes through ``memory.services``, so the Redis copy never serves what the admin
changed or deleted. Inlines, filters and counts are bounded: an owner with 100,000 turns costs
the same queries as one with ten.

Who may do what agrees with the API: every page needs ``memory.access_all_memories`` (the
permission that makes a service caller; ``is_staff`` alone grants nothing), and then the
model permission of the action: view, change (fact edits, dropping a cached copy) or delete
(deleting facts and turns, forgetting owners).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ORDER_VAR
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from memory import permissions, selectors, services
from memory.conf import conf
from memory.exceptions import FactNotFound, FactVersionConflict, MemoryException
from memory.models import Fact, FactVersion, Owner, Session, Turn
from memory.validators import (
    validate_fact_key,
    validate_json_value,
    validate_owner_id,
    validate_session_id,
)

# Turns and facts shown inline on an owner's page; the rest are one link away.
INLINE_TURNS = 20
INLINE_FACTS = 50
# Sessions offered by the session filter once an owner is chosen.
FILTER_SESSIONS = 50
# Owners named on the forget confirmation page.
CONFIRM_OWNERS = 100
# Below this many estimated rows an unfiltered list is counted exactly.
ESTIMATE_ABOVE = 100_000


class Refused(Exception):
    """A service refused an admin write; the view shows ``message`` and redirects."""

    def __init__(self, message: str, *, redirect_to: str | None = None) -> None:
        super().__init__(message)
        self.redirect_to = redirect_to


def _json(value: Any, *, indent: int | None = 2) -> str:
    """JSON as people read it: indented, non-ASCII kept as is."""
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _json_block(value: Any) -> SafeString:
    return format_html('<pre style="white-space: pre-wrap; margin: 0">{}</pre>', _json(value))


def _json_preview(value: Any, chars: int = 80) -> str:
    return Truncator(_json(value, indent=None)).chars(chars)


def _error_text(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return "; ".join(error.messages)
    return str(error)


class EstimatedCountPaginator(Paginator):
    """Counts a filtered list exactly, and the whole of a large table from Postgres's estimate.

    ``COUNT(*)`` of millions of turns takes seconds; the changelist only needs the page count.
    """

    @cached_property
    def count(self) -> int:
        objects = self.object_list
        if isinstance(objects, QuerySet) and not objects.query.where:
            connection = connections[objects.db]
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                        [objects.model._meta.db_table],
                    )
                    row = cursor.fetchone()
                if row is not None and row[0] > ESTIMATE_ABOVE:
                    return int(row[0])
        return super().count


# An owner's primary key as the filters take it: ASCII digits within a bigint.
OWNER_PK_RE = re.compile(r"[0-9]{1,19}")
BIGINT_MAX = 2**63 - 1


def _owner_pk(value: str) -> int | None:
    """The owner pk ``value`` names, or ``None``."""
    # NOTE: not str.isdigit(), which takes "²" (and int() does not) and "١٢".
    if not OWNER_PK_RE.fullmatch(value) or int(value) > BIGINT_MAX:
        return None
    return int(value)


class OwnerFilter(admin.SimpleListFilter):
    """One owner (``?owner=<pk>``): offers only the chosen owner, never a list of every owner."""

    title = "owner"
    parameter_name = "owner"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        if value is None:
            return []
        pk = _owner_pk(value)
        if pk is None:
            raise IncorrectLookupParameters(f"Not an owner: {value!r}.")
        external_id = Owner.objects.filter(pk=pk).values_list("external_id", flat=True).first()
        return [(value, external_id or f"#{value} (gone)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        pk = None if value is None else _owner_pk(value)
        if value is not None and pk is None:
            raise IncorrectLookupParameters(f"Not an owner: {value!r}.")
        return queryset if pk is None else queryset.filter(owner_id=pk)


class SessionFilter(admin.SimpleListFilter):
    """One session label; offers the chosen owner's most recent sessions once an owner is set."""

    title = "session"
    parameter_name = "session"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        if value is not None:
            try:
                validate_session_id(value)
            except ValidationError as e:
                # NOTE: a NUL would reach Postgres, which refuses it in text (a 500).
                raise IncorrectLookupParameters(f"Not a session id: {value!r}.") from e
        owner = _owner_pk(request.GET.get(OwnerFilter.parameter_name, ""))
        choices: list[str] = []
        if owner is not None:
            choices = list(
                Session.objects.filter(owner_id=owner)
                .order_by("-last_seen")
                .values_list("session_id", flat=True)[:FILTER_SESSIONS]
            )
        if value is not None and value not in choices:
            choices.append(value)
        return [(session_id, session_id) for session_id in choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(session_id=value)


class MemoryAdmin(admin.ModelAdmin):
    """Shared behaviour: pages for service callers only, and service refusals become an error
    message and a redirect, not a 500."""

    show_full_result_count = False
    paginator = EstimatedCountPaginator

    # NOTE: the admin reads and changes every owner's memory, as a service caller does through
    # the API: without ``access_all_memories`` no model permission opens a page.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return permissions.is_service_caller(request.user) and super().has_module_permission(
            request
        )

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return permissions.is_service_caller(request.user) and super().has_view_permission(
            request, obj
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return permissions.is_service_caller(request.user) and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return permissions.is_service_caller(request.user) and super().has_change_permission(
            request, obj
        )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return permissions.is_service_caller(request.user) and super().has_delete_permission(
            request, obj
        )

    def _url(self, model: type[Any], view: str, *args: Any, **query: Any) -> str:
        opts = model._meta
        url = reverse(
            f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_{view}", args=args
        )
        return f"{url}?{urlencode(query)}" if query else url

    def _owner_link(self, owner: Owner) -> SafeString:
        return format_html('<a href="{}">{}</a>', self._url(Owner, "change", owner.pk), owner)

    def _refused(self, request: HttpRequest, error: Refused, fallback: str) -> HttpResponse:
        self.message_user(request, str(error), messages.ERROR)
        return HttpResponseRedirect(error.redirect_to or fallback)

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except Refused as e:
            return self._refused(request, e, request.get_full_path())

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        try:
            return super().delete_view(request, object_id, extra_context)
        except Refused as e:
            return self._refused(request, e, self._url(self.model, "change", object_id))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        try:
            return super().changelist_view(request, extra_context)
        except Refused as e:
            return self._refused(request, e, request.get_full_path())


class _BoundedInlineFormSet(BaseInlineFormSet):
    """An inline formset over the first ``limit`` rows in ``order``, never the owner's whole set."""

    limit = 0
    order: Sequence[str] = ()

    def get_queryset(self) -> QuerySet[Any]:
        if not hasattr(self, "_bounded"):
            self._bounded = super().get_queryset().order_by(*self.order)[: self.limit]
        return self._bounded


class _LatestTurnsFormSet(_BoundedInlineFormSet):
    limit = INLINE_TURNS
    order = ("-seq",)


class _FirstFactsFormSet(_BoundedInlineFormSet):
    limit = INLINE_FACTS
    order = ("key",)


class _ReadOnlyInline(admin.TabularInline):
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class LatestTurnsInline(_ReadOnlyInline):
    model = Turn
    formset = _LatestTurnsFormSet
    verbose_name_plural = f"latest {INLINE_TURNS} turns, newest first"
    fields = ("seq", "session_id", "role", "content_preview", "created_at")
    readonly_fields = fields

    @admin.display(description="content")
    def content_preview(self, turn: Turn) -> str:
        return Truncator(turn.content).chars(120)


class FactsInline(_ReadOnlyInline):
    model = Fact
    formset = _FirstFactsFormSet
    verbose_name_plural = f"facts (first {INLINE_FACTS} by key)"
    fields = ("key", "value_preview", "version", "session_id", "updated_at")
    readonly_fields = fields

    @admin.display(description="value")
    def value_preview(self, fact: Fact) -> str:
        return _json_preview(fact.value, 120)


@admin.register(Owner)
class OwnerAdmin(MemoryAdmin):
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
        ("Cache", {"fields": ("stamp", "cache_dirty")}),
    )
    readonly_fields = ("external_id", "created_at", "updated_at", "browse", "stamp", "cache_dirty")
    inlines = (FactsInline, LatestTurnsInline)
    actions = ("forget_owners", "drop_cached_copy")

    # NOTE: an owner row changes only through the services' writes; the page is view-only.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # NOTE: the owner's "change" permission, meaningless for a view-only row, grants the
    # harmless cache actions.
    def has_drop_cache_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        return permissions.is_service_caller(request.user) and request.user.has_perm(
            f"{opts.app_label}.change_{opts.model_name}"
        )

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

    def get_deleted_objects(
        self, objs: Iterable[Owner], request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        # NOTE: Django's collector would list every turn (100,000 lines); count them instead.
        deleted: list[Any] = []
        totals = {"turns": 0, "sessions": 0, "facts": 0, "fact versions": 0}
        for owner in objs:
            summary = selectors.owner_summary_get(owner_id=owner.external_id)
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
        LogEntry.objects.create(
            user_id=request.user.pk,
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

    @admin.action(
        description="Forget these owners (turns, facts, sessions, cached copy)",
        permissions=["delete"],
    )
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

    @admin.action(
        description="Drop the cached copy (the next read rehydrates)",
        permissions=["drop_cache"],
    )
    def drop_cached_copy(self, request: HttpRequest, queryset: QuerySet[Owner]) -> None:
        if conf.CACHE_ALIAS is None:
            self.message_user(request, "No cache is configured: nothing to drop.", messages.INFO)
            return
        owner_ids = list(queryset.values_list("external_id", flat=True))
        unconfirmed = [
            owner_id for owner_id in owner_ids if not services.cache_drop(owner_id=owner_id)
        ]
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


@admin.register(Session)
class SessionAdmin(MemoryAdmin):
    list_display = ("session_id", "owner", "turn_count", "first_seen", "last_seen", "turns")
    list_select_related = ("owner",)
    list_filter = (OwnerFilter, ("last_seen", admin.DateFieldListFilter))
    search_fields = ("=owner__external_id", "session_id")
    search_help_text = "Exact owner id, or part of a session id."
    ordering = ("-last_seen",)
    fields = ("owner_link", "session_id", "turn_count", "first_seen", "last_seen", "turns")
    readonly_fields = fields
    actions = None

    def get_queryset(self, request: HttpRequest) -> QuerySet[Session]:
        return super().get_queryset(request).select_related("owner")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="owner")
    def owner_link(self, session: Session) -> SafeString:
        return self._owner_link(session.owner)

    @admin.display(description="turns")
    def turns(self, session: Session) -> SafeString:
        url = self._url(Turn, "changelist", owner=session.owner_id, session=session.session_id)
        return format_html('<a href="{}">{} turns</a>', url, session.turn_count)


@admin.register(Turn)
class TurnAdmin(MemoryAdmin):
    list_display = ("owner", "seq", "session_id", "role", "content_preview", "created_at")
    list_display_links = ("seq",)
    list_select_related = ("owner",)
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
        # NOTE: an exact owner id lists that owner's turns; any other text searches the content
        # through the search index, best match first unless the operator sorted by a column.
        by_owner, duplicates = super().get_search_results(request, queryset, search_term)
        if not search_term.strip() or by_owner.exists():
            return by_owner, duplicates
        try:
            matches = selectors.turn_search_queryset(q=search_term, queryset=queryset)
        except ValidationError as e:
            self.message_user(request, " ".join(e.messages), messages.WARNING)
            return queryset.none(), False
        if ORDER_VAR in request.GET:
            matches = matches.order_by(*queryset.query.order_by)
        return matches, False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Turn]:
        return super().get_queryset(request).select_related("owner")

    # NOTE: the history is append-only; an operator may only delete a turn (turn_delete).
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="owner")
    def owner_link(self, turn: Turn) -> SafeString:
        return self._owner_link(turn.owner)

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


class PrettyJSONField(forms.JSONField):
    """A JSON form field that shows its value indented, with non-ASCII as is."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return json.dumps(value, ensure_ascii=False, indent=2, cls=self.encoder)


def _clean_json_value(value: Any) -> Any:
    validate_json_value(value)
    return value


class FactChangeForm(forms.ModelForm):
    value = PrettyJSONField(widget=forms.Textarea(attrs={"rows": 10, "cols": 80}))
    # NOTE: the version the operator saw: a change made meanwhile (by the API, say) makes the
    # save a conflict instead of being silently overwritten.
    expected_version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = Fact
        fields = ("value",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["expected_version"].initial = self.instance.version

    def clean_value(self) -> Any:
        return _clean_json_value(self.cleaned_data["value"])


class FactAddForm(forms.ModelForm):
    user_id = forms.CharField(
        label="Owner id", max_length=128, validators=[validate_owner_id], help_text="The user id."
    )
    value = PrettyJSONField(widget=forms.Textarea(attrs={"rows": 10, "cols": 80}))

    class Meta:
        model = Fact
        fields = ("key", "value")

    def clean_key(self) -> str:
        key: str = self.cleaned_data["key"]
        validate_fact_key(key)
        return key

    def clean_value(self) -> Any:
        return _clean_json_value(self.cleaned_data["value"])


@admin.register(Fact)
class FactAdmin(MemoryAdmin):
    list_display = ("owner", "key", "value_preview", "version", "session_id", "updated_at")
    list_display_links = ("key",)
    list_select_related = ("owner",)
    list_filter = (OwnerFilter, ("updated_at", admin.DateFieldListFilter))
    search_fields = ("=owner__external_id", "key")
    search_help_text = "Exact owner id, or part of a fact key."
    ordering = ("owner_id", "key")
    form = FactChangeForm
    add_form = FactAddForm
    change_readonly_fields = (
        "owner_link",
        "key",
        "version",
        "session_id",
        "source_turn_seq",
        "updated_at",
        "history",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Fact]:
        return super().get_queryset(request).select_related("owner")

    def get_fieldsets(self, request: HttpRequest, obj: Fact | None = None) -> Any:
        if obj is None:
            return [(None, {"fields": ("user_id", "key", "value")})]
        editable = ("value", "expected_version")
        if not self.has_change_permission(request, obj):
            editable = ("value_json",)
        return [
            (None, {"fields": ("owner_link", "key", *editable)}),
            ("Provenance", {"fields": ("version", "session_id", "source_turn_seq", "updated_at")}),
            ("History", {"fields": ("history",)}),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Fact | None = None) -> Any:
        return () if obj is None else (*self.change_readonly_fields, "value_json")

    def get_form(
        self, request: HttpRequest, obj: Fact | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        kwargs["form"] = self.add_form if obj is None else self.form
        return super().get_form(request, obj, change, **kwargs)

    @admin.display(description="owner")
    def owner_link(self, fact: Fact) -> SafeString:
        return self._owner_link(fact.owner)

    @admin.display(description="value")
    def value_preview(self, fact: Fact) -> str:
        return _json_preview(fact.value)

    @admin.display(description="value")
    def value_json(self, fact: Fact) -> SafeString:
        return _json_block(fact.value)

    @admin.display(description="last versions")
    def history(self, fact: Fact) -> SafeString:
        versions = FactVersion.objects.filter(owner_id=fact.owner_id, key=fact.key).order_by(
            "-version"
        )[:10]
        rows = [
            (
                version.version,
                version.updated_at,
                "deleted" if version.deleted else _json(version.value),
            )
            for version in versions
        ]
        return format_html_join(
            "", '<div>v{} · {} <pre style="white-space: pre-wrap; margin: 0">{}</pre></div>', rows
        )

    def save_model(
        self, request: HttpRequest, obj: Fact, form: forms.ModelForm, change: bool
    ) -> None:
        owner_id = obj.owner.external_id if change else form.cleaned_data["user_id"]
        expected = form.cleaned_data.get("expected_version") if change else None
        try:
            fact, created = services.fact_put(
                owner_id=owner_id,
                key=obj.key,
                value=form.cleaned_data["value"],
                expected_version=expected,
            )
        except FactVersionConflict as e:
            raise Refused(
                f"Not saved: {owner_id}.{obj.key} was changed meanwhile (now version "
                f"{e.current}). Here is the current value; edit it again."
            ) from e
        except (MemoryException, ValidationError) as e:
            raise Refused(f"Not saved: {_error_text(e)}") from e
        if not change and not created:
            self.message_user(
                request,
                f"{owner_id} already had a fact {obj.key!r}; it is now at version {fact.version}.",
                messages.WARNING,
            )
        for field in ("id", "owner", "key", "value", "version", "session_id", "updated_at"):
            setattr(obj, field, getattr(fact, field))
        obj.source_turn_seq = fact.source_turn_seq
        obj._state.adding = False

    def delete_model(self, request: HttpRequest, obj: Fact) -> None:
        try:
            services.fact_delete(owner_id=obj.owner.external_id, key=obj.key)
        except FactNotFound as e:
            raise Refused(
                f"{obj} was already deleted.",
                redirect_to=self._url(Fact, "changelist", owner=obj.owner_id),
            ) from e
        except MemoryException as e:
            raise Refused(f"{obj} was not deleted: {e}") from e

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Fact]) -> None:
        deleted, failed = 0, []
        for owner_id, key in queryset.values_list("owner__external_id", "key"):
            try:
                services.fact_delete(owner_id=owner_id, key=key)
                deleted += 1
            except FactNotFound:
                pass
            except MemoryException as e:
                failed.append(f"{owner_id}.{key} ({e})")
        if failed:
            raise Refused(f"Deleted {deleted} fact(s); not deleted: {', '.join(failed)}.")
