"""Serializers of the HTTP API: input serializers that check requests with ``memory.validators``'
rules, and output serializers that describe the contract's shapes for the OpenAPI schema only (views
return the selectors' payloads as they are)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory.conf import conf
from memory.models import ROLES, Role
from memory.search import MAX_QUERY_CHARS, MAX_RESULTS
from memory.selectors.pages import DEFAULT_PAGE_SIZE, MAX_CURSOR_CHARS, MAX_PAGE_SIZE
from memory.tokens import MAX_TOKENS
from memory.validators import (
    DATE_OR_DATE_TIME_PATTERN,
    DATE_TIME_PATTERN,
    MAX_JSON_DEPTH,
    NUMBER_RULE,
    OWNER_ID_RE,
    SESSION_ID_RE,
    validate_content,
    validate_expires_at,
    validate_fact_key,
    validate_json_value,
    validate_metadata,
    validate_owner_id,
    validate_session_id,
)

# Keys one ``PATCH facts/`` may set: it is one transaction under the owner's lock.
MAX_FACTS_PER_MERGE = 256
# NOTE: validators the schema publishes as patterns; memory.validators makes the same checks with
# the same code, so each error is said once.
NO_NUL = RegexValidator(
    r"^[^\x00]*$", message="Null characters are not allowed.", code="null_characters_not_allowed"
)
CURSOR = RegexValidator(r"^[A-Za-z0-9_\-]+$", message="Invalid cursor.", code="invalid_cursor")
JSON_RULES = (
    f"Any JSON value; no string in it (keys included) may hold a NUL character, it is at most "
    f'{MAX_JSON_DEPTH} levels deep and MEMORY["MAX_JSON_BYTES"] (16384 by default) bytes of '
    f"JSON, and {NUMBER_RULE[0].lower()}{NUMBER_RULE[1:-1]}: otherwise a 400 naming the field."
)
# Largest ``after`` accepted: the range of the database's bigint ``seq``.
MAX_SEQ = 2**63 - 1


class TextField(serializers.CharField):
    """A JSON string (DRF's ``CharField`` takes ``12`` as ``"12"``), kept exactly as sent, checked
    by DRF's rules and ``memory.validators``'; each error code once."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)

    def run_validators(self, value: Any) -> None:
        try:
            super().run_validators(value)
        except serializers.ValidationError as e:
            # NOTE: DRF's CharField and validate_content both refuse NUL, say; say it once.
            unique = {getattr(detail, "code", None) or str(detail): detail for detail in e.detail}
            raise serializers.ValidationError(list(unique.values())) from e


class JSONValueField(serializers.JSONField):
    """Any JSON value Postgres ``jsonb`` stores (``validate_json_value``); null included."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_null", True)
        super().__init__(validators=[validate_json_value], **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        try:
            return super().to_internal_value(data)
        except RecursionError:
            # NOTE: a body shallow enough to parse may be too deep to re-encode; past MAX_JSON_DEPTH
            # anyway.
            self.fail("invalid")


@extend_schema_field(
    {"type": "string", "minLength": 1, "maxLength": 128, "pattern": SESSION_ID_RE.pattern}
)
class SessionIdField(TextField):
    """A session label: 1-128 characters, no control characters."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(min_length=1, max_length=128, validators=[validate_session_id], **kwargs)


class ContentField(TextField):
    """Turn content: at most ``MEMORY["MAX_TURN_CHARS"]`` characters (read per request)."""

    DESCRIPTION = (
        'At most MEMORY["MAX_TURN_CHARS"] characters, with no NUL character and no lone '
        "surrogate (a \\ud800 escape): otherwise a 400 and nothing is stored."
    )

    def __init__(self, **kwargs: Any) -> None:
        # NOTE: DRF re-runs __init__ per serializer instance, so a changed setting is seen next
        # request.
        kwargs.setdefault("help_text", self.DESCRIPTION)
        super().__init__(
            max_length=conf.MAX_TURN_CHARS,
            allow_blank=True,
            # NOTE: validate_content refuses NUL (the schema says so in ContentFieldSchema).
            validators=[validate_content],
            **kwargs,
        )


@extend_schema_field(
    {"type": "string", "minLength": 1, "maxLength": 128, "pattern": OWNER_ID_RE.pattern}
)
class OwnerIdField(TextField):
    """An owner id: 1-128 letters, digits and ``_ - . @ :``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(min_length=1, max_length=128, validators=[validate_owner_id], **kwargs)


class AnyJSONField(serializers.JSONField):
    """Any JSON value, null included, in an answer (output serializers only)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)


class MetadataField(serializers.DictField):
    """Turn metadata: a JSON object of JSON values (``validate_metadata``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(validators=[validate_metadata], **kwargs)


class FactsMapField(serializers.DictField):
    """Fact key -> new value; the keys are checked by ``FactsMergeInputSerializer``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=JSONValueField(), **kwargs)


# NOTE: ``str.isspace``'s characters spelled out, so every regex engine reads the pattern alike.
_SPACE = "\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
QUERY_PATTERN = f"^[^\\x00]*[^\\x00{_SPACE}][^\\x00]*$"


@extend_schema_field(
    {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS, "pattern": QUERY_PATTERN}
)
class QueryTextField(serializers.CharField):
    """A search text: 1-200 characters once stripped, not blank, no NUL."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=MAX_QUERY_CHARS, **kwargs)


class SearchModeField(serializers.ChoiceField):
    """A search mode; ``semantic`` and ``hybrid`` only where search by meaning is on."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=["text", "semantic", "hybrid"], **kwargs)


@extend_schema_field({"type": "string", "pattern": DATE_OR_DATE_TIME_PATTERN, "maxLength": 64})
class MomentField(serializers.CharField):
    """An ISO-8601 date (``2026-05-01``) or date-time with its offset (other ISO 8601 forms are
    taken too); anything else is a 400. Optional: a moment only narrows a read."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=64, **{"required": False, **kwargs})


def _asked_at(named_in: str) -> MomentField:
    """A question's ``now``: what a time named in the field ``named_in`` is read against."""
    return MomentField(
        help_text="ISO-8601: when the question is asked (default: the server's clock); a time "
        f"named in {named_in} is read against it.",
    )


@extend_schema_field({"type": "string", "format": "date-time", "pattern": DATE_TIME_PATTERN})
class ExpiresAtField(serializers.DateTimeField):
    """When a fact expires: a date and time with its offset (the server also takes other ISO
    8601 forms, such as one without seconds)."""


class ScoreField(serializers.FloatField):
    """A score from 0 to 1. Optional: a least score only narrows a read."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(min_value=0.0, max_value=1.0, **{"required": False, **kwargs})


class PageSizeField(serializers.IntegerField):
    """How many items a page holds: 1..``MAX_PAGE_SIZE``, ``DEFAULT_PAGE_SIZE`` when absent."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            required=False,
            default=DEFAULT_PAGE_SIZE,
            min_value=1,
            max_value=MAX_PAGE_SIZE,
            **kwargs,
        )


class ContextTurnsField(serializers.IntegerField):
    """How many turns a context holds: 0..``MEMORY["MAX_CONTEXT_TURNS"]`` (read per request)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(min_value=0, max_value=conf.MAX_CONTEXT_TURNS, **kwargs)


# Input -------------------------------------------------------------------------------------


class TurnInputSerializer(serializers.Serializer[dict[str, Any]]):
    """The body of ``POST users/{user_id}/turns/``."""

    session_id = SessionIdField()
    role = serializers.ChoiceField(choices=Role.choices)
    content = ContentField()
    metadata = MetadataField(required=False)


def turn_input_accepted(data: Any) -> dict[str, Any] | None:
    """What ``TurnInputSerializer(data=data)`` validates ``data`` to when every field takes it as it
    is; ``None`` for any other body, which the serializer must judge.

    NOTE: the append's fast check: DRF deep-copies declared fields per instance, most of the ~100 us
    validation took. A subset of what the serializer accepts, with the same result.
    """
    if type(data) is not dict:
        return None
    session_id, role, content = data.get("session_id"), data.get("role"), data.get("content")
    if type(session_id) is not str or type(role) is not str or type(content) is not str:
        return None
    accepted: dict[str, Any] = {"session_id": session_id, "role": role, "content": content}
    if "metadata" in data:
        metadata = data["metadata"]
        if type(metadata) is not dict:
            return None
        accepted["metadata"] = dict(metadata)
    if role not in ROLES:
        return None
    try:
        # NOTE: the fields' own rules, which cover what DRF's CharField adds.
        validate_session_id(session_id)
        validate_content(content)
        if "metadata" in accepted:
            validate_metadata(accepted["metadata"])
    except DjangoValidationError:
        return None
    return accepted


class TurnListQuerySerializer(serializers.Serializer[dict[str, Any]]):
    """The query of ``GET users/{user_id}/turns/``: keyset pagination on ``seq``."""

    session_id = SessionIdField(required=False, help_text="Only the turns with this label.")
    after = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_SEQ, help_text="Only turns with a greater seq."
    )
    limit = PageSizeField(help_text="Turns on this page.")


class PageQuerySerializer(serializers.Serializer[dict[str, Any]]):
    """The query of ``GET users/{user_id}/sessions/`` and ``.../facts/{key}/history/``: keyset
    pagination with an opaque cursor."""

    limit = PageSizeField(help_text="Items on this page.")
    cursor = TextField(
        required=False,
        min_length=1,
        max_length=MAX_CURSOR_CHARS,
        validators=[CURSOR],
        help_text="Where the page starts: the cursor of the previous page's next URL. Opaque: "
        "any value no page gave is a 400.",
    )


class ContextQuerySerializer(serializers.Serializer[dict[str, Any]]):
    """The query of ``GET users/{user_id}/context/``."""

    turns = ContextTurnsField(
        required=False,
        help_text='Turns in the context; default MEMORY["CONTEXT_TURNS"].',
    )


class ContextMessagesQuerySerializer(serializers.Serializer[dict[str, Any]]):
    """The query of ``GET users/{user_id}/context/messages/``."""

    max_tokens = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_TOKENS,
        help_text='Token budget of all the messages, counted by MEMORY["TOKEN_COUNTER"]: the '
        "facts' message, then the newest whole turns that fit. 400 if the facts alone exceed it.",
    )
    turns = ContextTurnsField(
        required=False,
        help_text='Most turns; default MEMORY["CONTEXT_TURNS"], or with max_tokens '
        'MEMORY["MAX_CONTEXT_TURNS"].',
    )
    query = QueryTextField(
        required=False,
        help_text="1-200 characters: recall the older turns most relevant to it (by meaning and "
        "words where embeddings are on, else by words), as many as fit a third of the tokens "
        "left, into a third system message; their seqs are in recalled.",
    )
    now = _asked_at("query")
    min_score = ScoreField(
        help_text="Recall only turns whose search score is at least this.",
    )


class FactPutInputSerializer(serializers.Serializer[dict[str, Any]]):
    """The body of ``PUT users/{user_id}/facts/{key}/``."""

    value = JSONValueField(help_text=JSON_RULES)
    session_id = SessionIdField(required=False, allow_null=True)
    expires_at = ExpiresAtField(
        required=False,
        allow_null=True,
        help_text="When the fact expires (RFC 3339, a time in the future, else a 400): from then "
        "on it is absent from every read, and a sweep deletes it. Absent or null: never; a PUT "
        "without it clears an earlier expiry.",
    )

    def validate_expires_at(self, value: Any) -> Any:
        if value is not None:
            try:
                validate_expires_at(value, timezone.now())
            except DjangoValidationError as e:
                raise serializers.ValidationError(e.messages) from e
        return value


class FactsMergeInputSerializer(serializers.Serializer[dict[str, Any]]):
    """The body of ``PATCH users/{user_id}/facts/``: keys to set, others left as they are."""

    facts = FactsMapField(
        help_text=f"Fact key (1-64 lower-case letters, digits and _ - ., not only dots) -> new "
        f"value; at most "
        f'{MAX_FACTS_PER_MERGE} keys, and the user at most MEMORY["MAX_FACTS"] facts after it.',
    )
    session_id = SessionIdField(required=False, allow_null=True)

    # NOTE: "facts" is always required: drf-spectacular would make every PATCH body partial.
    @property
    def partial(self) -> bool:
        return False

    @partial.setter
    def partial(self, value: bool) -> None:
        pass

    def validate_facts(self, value: dict[str, Any]) -> dict[str, Any]:
        if len(value) > MAX_FACTS_PER_MERGE:
            raise serializers.ValidationError(
                f"Ensure this object has no more than {MAX_FACTS_PER_MERGE} keys."
            )
        errors: dict[str, list[str]] = {}
        for key in value:
            try:
                validate_fact_key(key)
            except DjangoValidationError as e:
                errors[key] = e.messages
        if errors:
            raise serializers.ValidationError(errors)
        return value


class SearchQuerySerializer(serializers.Serializer[dict[str, Any]]):
    """The query of ``GET users/{user_id}/search/``."""

    q = QueryTextField(
        help_text="1-200 characters of free text: English words in any case and form, Chinese "
        "text with no spaces needed. Never query syntax.",
    )
    limit = serializers.IntegerField(
        required=False, default=20, min_value=1, max_value=MAX_RESULTS, help_text="Most turns."
    )
    mode = SearchModeField(
        required=False,
        help_text="text: by the words; semantic: by meaning (embeddings); hybrid: both rankings "
        "fused. Default: hybrid where search by meaning is on, else text; semantic or hybrid "
        "where it is off is a 400.",
    )
    after = MomentField(
        help_text="ISO-8601 date or date-time: only turns created at or after it. 400 if bad.",
    )
    before = MomentField(
        help_text="ISO-8601 date or date-time: only turns created before it (a date: before "
        "that day starts). 400 if bad.",
    )
    now = _asked_at("q (last month, 上个月)")
    min_score = ScoreField(
        help_text="Only results whose score (a calibrated relevance in [0, 1]) is at least this.",
    )


class LinkInputSerializer(serializers.Serializer[dict[str, Any]]):
    """The body of ``POST users/{user_id}/link/``."""

    from_user_id = OwnerIdField(
        help_text="The anonymous owner whose memory moves to the user, then is forgotten; "
        "not the user itself (a 400).",
    )


# Output (schema only) ---------------------------------------------------------------------


class TurnSerializer(serializers.Serializer[dict[str, Any]]):
    """A turn."""

    seq = serializers.IntegerField(min_value=1)
    session_id = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices)
    content = serializers.CharField(allow_blank=True)
    metadata = serializers.DictField()
    created_at = serializers.DateTimeField()


class TurnPageSerializer(serializers.Serializer[dict[str, Any]]):
    """A page of turns, oldest first, with the URL of the next page."""

    results = TurnSerializer(many=True)
    next = serializers.URLField(allow_null=True)


class ContextSerializer(serializers.Serializer[dict[str, Any]]):
    """What a chat backend puts before the model for the next reply."""

    user_id = serializers.CharField()
    facts = serializers.DictField(child=AnyJSONField())
    turns = TurnSerializer(many=True)
    # A declared field (the metaclass takes it off the class), not Field.source.
    source = serializers.ChoiceField(choices=["cache", "database"])  # type: ignore[assignment]


class MessageSerializer(serializers.Serializer[dict[str, Any]]):
    """One message of an LLM chat API."""

    role = serializers.ChoiceField(choices=Role.choices)
    content = serializers.CharField(allow_blank=True)


class ContextMessagesSerializer(serializers.Serializer[dict[str, Any]]):
    """The context as model messages: the facts as a system message, then the turns."""

    user_id = serializers.CharField()
    messages = MessageSerializer(many=True)
    facts = serializers.DictField(child=AnyJSONField())
    # A declared field (the metaclass takes it off the class), not Field.source.
    source = serializers.ChoiceField(choices=["cache", "database"])  # type: ignore[assignment]
    tokens = serializers.IntegerField(min_value=0)
    summary_through_seq = serializers.IntegerField(
        allow_null=True,
        min_value=1,
        help_text="The through_seq of the summary sent as the second system message, or null "
        "when none was sent (the turns sent reach back to it, or the owner has none).",
    )
    recalled = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        help_text="The seqs of the older turns recalled for query into the third system "
        "message, in seq order; [] without a query or when none was found or fit.",
    )


class SummarySerializer(serializers.Serializer[dict[str, Any]]):
    """The owner's summary of its turns 1..through_seq."""

    text = serializers.CharField(allow_blank=True)
    through_seq = serializers.IntegerField(min_value=1)
    tokens = serializers.IntegerField(min_value=0)
    updated_at = serializers.DateTimeField()


class FactSerializer(serializers.Serializer[dict[str, Any]]):
    """A fact."""

    key = serializers.CharField()
    value = AnyJSONField()
    session_id = serializers.CharField(allow_null=True)
    updated_at = serializers.DateTimeField()
    version = serializers.IntegerField(min_value=1)
    expires_at = serializers.DateTimeField(
        allow_null=True, help_text="When the fact expires; null: never."
    )


class FactListSerializer(serializers.Serializer[dict[str, Any]]):
    """All facts of an owner, by key."""

    facts = FactSerializer(many=True)


class FactVersionSerializer(serializers.Serializer[dict[str, Any]]):
    """One change of a fact; a delete leaves a last version with ``deleted: true``."""

    key = serializers.CharField()
    value = AnyJSONField()
    version = serializers.IntegerField(min_value=1)
    session_id = serializers.CharField(allow_null=True)
    updated_at = serializers.DateTimeField()
    source_turn_seq = serializers.IntegerField(allow_null=True)
    deleted = serializers.BooleanField()
    actor = serializers.CharField(
        help_text='Who made the change: "extractor", "api:<username>", "admin:<username>", '
        '"expiry", "python" (a direct Python API call), or what an imported document said '
        '("import" where it said nothing).'
    )
    expires_at = serializers.DateTimeField(
        allow_null=True, help_text="The expiry this version set; null: never."
    )


class FactHistorySerializer(serializers.Serializer[dict[str, Any]]):
    """A page of the versions of one fact, newest first, with the URL of the next page."""

    results = FactVersionSerializer(many=True)
    next = serializers.URLField(allow_null=True)


class SessionSerializer(serializers.Serializer[dict[str, Any]]):
    """A session label with the span and number of its turns."""

    session_id = serializers.CharField()
    first_seen = serializers.DateTimeField()
    last_seen = serializers.DateTimeField()
    turn_count = serializers.IntegerField(min_value=0)


class SessionListSerializer(serializers.Serializer[dict[str, Any]]):
    """A page of an owner's sessions, most recently seen first, with the URL of the next page."""

    results = SessionSerializer(many=True)
    next = serializers.URLField(allow_null=True)


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    """An error that concerns no one field."""

    detail = serializers.CharField()


class ScoredTurnSerializer(TurnSerializer):
    """A turn found by a search, with its score and its neighbouring turns."""

    score = serializers.FloatField(
        help_text="A calibrated relevance in [0, 1], on the same scale for every query of a mode "
        "(docs/recall.md): about the chance that the turn bears on the question.",
    )
    context = TurnSerializer(  # type: ignore[assignment]
        many=True,
        required=False,
        help_text="The turns just before and after it in its session, but those among the "
        "results, oldest first.",
    )


class TurnSearchSerializer(serializers.Serializer[dict[str, Any]]):
    """The turns that match a search, best match first."""

    results = ScoredTurnSerializer(many=True)


class ExportSerializer(serializers.Serializer[dict[str, Any]]):
    """The owner's whole memory, streamed from one snapshot: facts, their versions, turns in seq
    order, sessions most recently seen first."""

    format = serializers.ChoiceField(choices=["memory-export"])
    version = serializers.ChoiceField(choices=[1])
    user_id = serializers.CharField()
    exported_at = serializers.DateTimeField(help_text="The instant of the snapshot.")
    facts = FactSerializer(many=True)
    fact_history = FactVersionSerializer(many=True)
    turns = TurnSerializer(many=True)
    sessions = SessionSerializer(many=True)
    summary = SummarySerializer(allow_null=True)


class LinkResultSerializer(serializers.Serializer[dict[str, Any]]):
    """What a link moved to the user."""

    turns_moved = serializers.IntegerField(min_value=0)
    facts_moved = serializers.IntegerField(min_value=0)
