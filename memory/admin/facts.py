"""The facts' page: editing and deleting facts through the services, with their history."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from memory import services
from memory.admin.base import (
    OwnedAdmin,
    OwnerFilter,
    Refused,
    _error_text,
    _json,
    _json_block,
    _json_preview,
)
from memory.exceptions import FactNotFound, FactVersionConflict, MemoryException
from memory.models import Fact, FactVersion
from memory.validators import (
    actor_of,
    validate_expires_at,
    validate_fact_key,
    validate_json_value,
    validate_owner_id,
)


class PrettyJSONField(forms.JSONField):
    """A JSON form field that shows its value indented, with non-ASCII as is."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return json.dumps(value, ensure_ascii=False, indent=2, cls=self.encoder)


def _clean_json_value(value: Any) -> Any:
    validate_json_value(value)
    return value


def _clean_expires_at(value: Any) -> Any:
    if value is not None:
        validate_expires_at(value, timezone.now())
    return value


EXPIRES_HELP = (
    "From this time on the fact is absent from every read, and the sweep (manage.py "
    "memory_expire) deletes it. Empty: it never expires. A time in the future."
)


class FactChangeForm(forms.ModelForm):  # type: ignore[type-arg]  # not subscriptable at run time
    value = PrettyJSONField(widget=forms.Textarea(attrs={"rows": 10, "cols": 80}))
    # NOTE: the version the operator saw: a change made meanwhile (by the API, say) makes the
    # save a conflict instead of being silently overwritten.
    expected_version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = Fact
        fields = ("value", "expires_at")
        help_texts = {"expires_at": EXPIRES_HELP}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["expected_version"].initial = self.instance.version

    def clean_value(self) -> Any:
        return _clean_json_value(self.cleaned_data["value"])

    def clean_expires_at(self) -> Any:
        return _clean_expires_at(self.cleaned_data["expires_at"])


class FactAddForm(forms.ModelForm):  # type: ignore[type-arg]  # not subscriptable at run time
    user_id = forms.CharField(
        label="Owner id", max_length=128, validators=[validate_owner_id], help_text="The user id."
    )
    value = PrettyJSONField(widget=forms.Textarea(attrs={"rows": 10, "cols": 80}))

    class Meta:
        model = Fact
        fields = ("key", "value", "expires_at")
        help_texts = {"expires_at": EXPIRES_HELP}

    def clean_expires_at(self) -> Any:
        return _clean_expires_at(self.cleaned_data["expires_at"])

    def clean_key(self) -> str:
        key: str = self.cleaned_data["key"]
        validate_fact_key(key)
        return key

    def clean_value(self) -> Any:
        return _clean_json_value(self.cleaned_data["value"])


def admin_actor(request: HttpRequest) -> str:
    """The actor a fact version of an admin save or delete records: ``admin:<username>``."""
    return actor_of("admin", request.user.get_username())


@admin.register(Fact)
class FactAdmin(OwnedAdmin):
    list_display = (
        "owner",
        "key",
        "value_preview",
        "version",
        "session_id",
        "updated_at",
        "expires_at",
    )
    list_display_links = ("key",)
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

    def get_fieldsets(self, request: HttpRequest, obj: Fact | None = None) -> Any:
        if obj is None:
            return [(None, {"fields": ("user_id", "key", "value", "expires_at")})]
        editable: tuple[str, ...] = ("value", "expires_at", "expected_version")
        if not self.has_change_permission(request, obj):
            editable = ("value_json", "expires_at")
        return [
            (None, {"fields": ("owner_link", "key", *editable)}),
            ("Provenance", {"fields": ("version", "session_id", "source_turn_seq", "updated_at")}),
            ("History", {"fields": ("history",)}),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Fact | None = None) -> Any:
        if obj is None:
            return ()
        if not self.has_change_permission(request, obj):
            return (*self.change_readonly_fields, "value_json", "expires_at")
        return (*self.change_readonly_fields, "value_json")

    def get_form(
        self, request: HttpRequest, obj: Fact | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        kwargs["form"] = self.add_form if obj is None else self.form
        return super().get_form(request, obj, change, **kwargs)

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
                version.actor,
                "deleted" if version.deleted else _json(version.value),
            )
            for version in versions
        ]
        return format_html_join(
            "",
            '<div>v{} · {} · by {} <pre style="white-space: pre-wrap; margin: 0">{}</pre></div>',
            rows,
        )

    def save_model(
        self, request: HttpRequest, obj: Fact, form: forms.ModelForm[Fact], change: bool
    ) -> None:
        owner_id = obj.owner.external_id if change else form.cleaned_data["user_id"]
        expected = form.cleaned_data.get("expected_version") if change else None
        try:
            fact, created = services.fact_put(
                owner_id=owner_id,
                key=obj.key,
                value=form.cleaned_data["value"],
                expected_version=expected,
                expires_at=form.cleaned_data.get("expires_at"),
                actor=admin_actor(request),
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
        fields = (
            "id",
            "owner",
            "key",
            "value",
            "version",
            "session_id",
            "updated_at",
            "expires_at",
        )
        for field in fields:
            setattr(obj, field, getattr(fact, field))
        obj.source_turn_seq = fact.source_turn_seq
        obj._state.adding = False

    def delete_model(self, request: HttpRequest, obj: Fact) -> None:
        try:
            services.fact_delete(
                owner_id=obj.owner.external_id, key=obj.key, actor=admin_actor(request)
            )
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
                services.fact_delete(owner_id=owner_id, key=key, actor=admin_actor(request))
                deleted += 1
            except FactNotFound:
                pass
            except MemoryException as e:
                failed.append(f"{owner_id}.{key} ({e})")
        if failed:
            raise Refused(f"Deleted {deleted} fact(s); not deleted: {', '.join(failed)}.")
