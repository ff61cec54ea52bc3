"""The admin's shared pieces: bounded pagination and inlines, the owner and session filters,
and ``MemoryAdmin``, the base of every page (who may do what, errors shown as messages)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from memory import permissions
from memory.models import Fact, Owner, Session, Turn
from memory.validators import (
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


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]  # not subscriptable at run time
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


class MemoryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # not subscriptable at run time
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


class OwnedAdmin(MemoryAdmin):
    """The page of a model with an ``owner``: rows read with their owner, and its link as the
    column ``owner_link``."""

    list_select_related = ("owner",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).select_related("owner")

    @admin.display(description="owner")
    def owner_link(self, obj: Any) -> SafeString:
        return self._owner_link(obj.owner)


class _BoundedInlineFormSet(BaseInlineFormSet):  # type: ignore[type-arg]  # not subscriptable at run time
    """An inline formset over the first ``limit`` rows in ``order``, never the owner's whole set."""

    limit = 0
    order: Sequence[str] = ()

    def get_queryset(self) -> QuerySet[Any]:
        if not hasattr(self, "_bounded"):
            self._bounded = super().get_queryset().order_by(*self.order)[: self.limit]
        return self._bounded


class ViewOnly:
    """A page or inline that adds and changes nothing: its rows change only through the
    services' writes."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class NoDelete:
    """A page or inline that deletes nothing either."""

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _preview(description: str, show: Callable[[Any], str]) -> Callable[[Any, Any], str]:
    """An admin column ``description``: ``show(row)`` in at most 120 characters."""

    @admin.display(description=description)
    def column(page: Any, row: Any) -> str:
        return Truncator(show(row)).chars(120)

    return column


class _ReadOnlyInline(ViewOnly, NoDelete, admin.TabularInline):  # type: ignore[type-arg]  # not subscriptable at run time
    """An owner's first ``limit`` rows in ``order``, read only; each subclass's ``fields`` are
    shown as they are."""

    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True
    limit = 0
    order: Sequence[str] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        bounds = {"limit": cls.limit, "order": cls.order}
        cls.formset = type(f"_{cls.__name__}FormSet", (_BoundedInlineFormSet,), bounds)
        cls.readonly_fields = tuple(name for name in cls.fields or () if isinstance(name, str))


class LatestTurnsInline(_ReadOnlyInline):
    model, limit, order = Turn, INLINE_TURNS, ("-seq",)
    verbose_name_plural = f"latest {INLINE_TURNS} turns, newest first"
    fields = ("seq", "session_id", "role", "content_preview", "created_at")
    content_preview = _preview("content", lambda turn: turn.content)


class FactsInline(_ReadOnlyInline):
    model, limit, order = Fact, INLINE_FACTS, ("key",)
    verbose_name_plural = f"facts (first {INLINE_FACTS} by key)"
    fields = ("key", "value_preview", "version", "session_id", "updated_at")
    value_preview = _preview("value", lambda fact: _json(fact.value, indent=None))
