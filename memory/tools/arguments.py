"""The arguments of each tool, checked by DRF serializers built from the API's own fields and
validators (``memory.serializers``, ``memory.validators``), as strict as the tools' JSON Schemas:
a number where a string is due, ``"5"`` where an integer is, or an argument a schema does not
list (``additionalProperties: false``: an owner, above all) is an error, never coerced or dropped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from memory import when
from memory.search import MAX_QUERY_CHARS
from memory.serializers import JSON_RULES, JSONValueField, TextField
from memory.validators import (
    DATE_OR_DATE_TIME_PATTERN,
    FACT_KEY_RE,
    has_surrogate,
    validate_fact_key,
    validate_json_value,
)

# Most turns one search_memory or recent_turns call may ask for.
MAX_SEARCH_RESULTS = 20
MAX_RECENT_TURNS = 50
# NOTE: names a model may try for the owner; the refusal says why, not just "unknown".
OWNER_NAMES = frozenset({"owner", "owner_id", "user", "user_id", "username", "uid"})


def validate_query_text(value: str) -> None:
    """A search text holds at least one character that is not white space (it is searched
    stripped, as ``memory.search.clean_query`` strips it)."""
    if not value.strip():
        raise DjangoValidationError("Give words to search for, not only spaces.", code="blank")


def validate_when(value: str) -> None:
    """An ISO-8601 date or date-time (``memory.when.when_parse``) of the tools' shape
    (``memory.validators.DATE_OR_DATE_TIME_PATTERN``, the API's)."""
    if not re.match(DATE_OR_DATE_TIME_PATTERN, value):
        raise DjangoValidationError(
            "Enter an ISO-8601 date (2026-05-01) or date-time (2026-05-01T12:00:00Z).",
            code="invalid",
        )
    try:
        when.when_parse(value, field="value")
    except DjangoValidationError as e:
        raise DjangoValidationError(e.message_dict["value"][0], code="invalid") from e


class StrictNumberField(serializers.FloatField):
    """A JSON number: not ``"0.5"`` nor ``true``, which the JSON Schema ``"type": "number"``
    refuses."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: DRF's ``IntegerField`` also takes ``"5"`` and ``true``, which JSON Schema's
    ``"type": "integer"`` refuses; ``5.0`` is an integer to both."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


def _limit(value: Any, *, most: int) -> bool:
    return type(value) is int and 1 <= value <= most


def _text(value: Any, *, most: int) -> TypeGuard[str]:
    return (
        type(value) is str
        and 1 <= len(value) <= most
        and "\x00" not in value
        and not has_surrogate(value)
    )


def _fact_key(value: Any) -> bool:
    return type(value) is str and FACT_KEY_RE.fullmatch(value) is not None


class ToolArguments(serializers.Serializer[dict[str, Any]]):
    """The arguments of one tool: exactly its fields, each as its schema says; any other
    argument is an error (``additionalProperties: false``)."""

    @classmethod
    def accepted(cls, data: Mapping[str, Any]) -> dict[str, Any] | None:
        """What the serializer validates ``data`` to where every argument is plainly as its field
        takes it; ``None`` for anything else, which the serializer must judge.

        NOTE: a fast check without building the serializer (DRF deep-copies its fields): a subset
        of what the serializer accepts, with the same result.
        """
        return None

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        errors: dict[str, Any] = {}
        if isinstance(data, Mapping):
            for name in data:
                if name in self.fields:
                    continue
                if str(name).lower() in OWNER_NAMES:
                    errors[str(name)] = [
                        "The owner is never an argument: these tools always work on the memory "
                        "of the user this conversation is with."
                    ]
                else:
                    takes = ", ".join(self.fields) or "no arguments"
                    errors[str(name)] = [f"Unknown argument; this tool takes {takes}."]
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as e:
            detail = e.detail if isinstance(e.detail, dict) else {"arguments": e.detail}
            raise serializers.ValidationError({**detail, **errors}) from e
        if errors:
            raise serializers.ValidationError(errors)
        return value  # type: ignore[no-any-return]


class SearchMemoryArguments(ToolArguments):
    """``search_memory``."""

    query = TextField(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        validators=[validate_query_text],
        help_text="1-200 characters of free text, not only spaces.",
    )
    limit = StrictIntegerField(required=False, default=5, min_value=1, max_value=MAX_SEARCH_RESULTS)
    after = TextField(required=False, validators=[validate_when])
    before = TextField(required=False, validators=[validate_when])
    min_score = StrictNumberField(required=False, min_value=0.0, max_value=1.0)

    @classmethod
    def accepted(cls, data: Mapping[str, Any]) -> dict[str, Any] | None:
        query, limit = data.get("query"), data.get("limit", 5)
        if not set(data) <= {"query", "limit"} or not _text(query, most=MAX_QUERY_CHARS):
            return None
        if not query.strip() or not _limit(limit, most=MAX_SEARCH_RESULTS):
            return None
        return {"query": query, "limit": limit}


class GetProfileArguments(ToolArguments):
    """``get_profile``: none."""

    @classmethod
    def accepted(cls, data: Mapping[str, Any]) -> dict[str, Any] | None:
        return None if data else {}


class FactKeyField(TextField):
    """A fact key as ``PUT facts/{key}/`` takes it (``validate_fact_key``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(validators=[validate_fact_key], **kwargs)


class RememberFactArguments(ToolArguments):
    """``remember_fact``."""

    key = FactKeyField()
    value = JSONValueField(help_text=JSON_RULES)

    @classmethod
    def accepted(cls, data: Mapping[str, Any]) -> dict[str, Any] | None:
        if set(data) != {"key", "value"} or not _fact_key(data["key"]):
            return None
        try:
            validate_json_value(data["value"])
        except DjangoValidationError:
            return None
        return {"key": data["key"], "value": data["value"]}


class ForgetFactArguments(ToolArguments):
    """``forget_fact``."""

    key = FactKeyField()

    @classmethod
    def accepted(cls, data: Mapping[str, Any]) -> dict[str, Any] | None:
        if set(data) != {"key"} or not _fact_key(data["key"]):
            return None
        return {"key": data["key"]}


class RecentTurnsArguments(ToolArguments):
    """``recent_turns``."""

    limit = StrictIntegerField(required=False, default=10, min_value=1, max_value=MAX_RECENT_TURNS)

    @classmethod
    def accepted(cls, data: Mapping[str, Any]) -> dict[str, Any] | None:
        limit = data.get("limit", 10)
        if not set(data) <= {"limit"} or not _limit(limit, most=MAX_RECENT_TURNS):
            return None
        return {"limit": limit}
