"""The facts' page: editing and deleting facts through the services, with their history."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from memory import services
from memory.admin.base import (
    MemoryAdmin,
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
