"""The plain dict shapes of the contract (a turn, a fact, a context) and the converters from
model rows to them. The cache stores exactly these dicts, so a hit needs no conversion."""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypedDict, cast

from memory.models import Fact, FactVersion, Session, Turn


class TurnPayload(TypedDict):
    seq: int
    session_id: str
    role: str
    content: str
    metadata: dict[str, Any]
    created_at: str


class FactPayload(TypedDict):
    key: str
    value: Any
    session_id: str | None
    updated_at: str
    version: int
    expires_at: str | None


class FactVersionPayload(TypedDict):
    key: str
    value: Any
    version: int
    session_id: str | None
    updated_at: str
    source_turn_seq: int | None
    deleted: bool
    actor: str
    expires_at: str | None


class SessionPayload(TypedDict):
    session_id: str
    first_seen: str
    last_seen: str
    turn_count: int


class SummaryPayload(TypedDict):
    text: str
    through_seq: int
    tokens: int
    updated_at: str


class ContextPayload(TypedDict):
    user_id: str
    facts: dict[str, Any]
    turns: list[TurnPayload]
    source: Literal["cache", "database"]


class MessagePayload(TypedDict):
    role: str
    content: str


class ContextMessagesPayload(TypedDict):
    user_id: str
    messages: list[MessagePayload]
    facts: dict[str, Any]
    source: Literal["cache", "database"]
    tokens: int
    summary_through_seq: int | None
    recalled: list[int]


def isoformat(value: dt.datetime) -> str:
    """ISO-8601 the way DRF writes it: UTC as ``Z``."""
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


TURN_FIELDS = ("seq", "session_id", "role", "content", "metadata", "created_at")
FACT_FIELDS = ("key", "value", "session_id", "updated_at", "version", "expires_at")
# A fact instance as the row ``values_list(*FACT_FIELDS)`` reads of it.
_fact_row = operator.attrgetter(*FACT_FIELDS)


def turn_payload(turn: Turn) -> TurnPayload:
    # NOTE: a literal of TURN_FIELDS, not ``turn_payload_from_row``: every append builds one.
    return {
        "seq": turn.seq,
        "session_id": turn.session_id,
        "role": turn.role,
        "content": turn.content,
        "metadata": turn.metadata,
        "created_at": isoformat(turn.created_at),
    }


def _row_payload(fields: tuple[str, ...], row: tuple[Any, ...], *instants: str) -> dict[str, Any]:
    """The fields of a ``values_list(*fields)`` row by name, in order; the ``instants`` among
    them as ``isoformat`` writes them (``None`` stays ``None``)."""
    payload = dict(zip(fields, row, strict=True))
    for name in instants:
        if payload[name] is not None:
            payload[name] = isoformat(payload[name])
    return payload


def turn_payload_from_row(row: tuple[Any, ...]) -> TurnPayload:
    """A turn from a ``values_list(*TURN_FIELDS)`` row, without building a model instance."""
    return cast(TurnPayload, _row_payload(TURN_FIELDS, row, "created_at"))


def payloads_from_arrays(
    turns: Iterable[Sequence[Any]], facts: Iterable[Sequence[Any]]
) -> tuple[list[TurnPayload], list[FactPayload]]:
    """Turns and facts from arrays of their fields' JSON values in ``TURN_FIELDS`` and
    ``FACT_FIELDS`` order (as the cache and the one-statement read hold them), in their order."""
    # NOTE: a literal per payload, not dict(zip(...)): over twice as fast.
    turn_list: list[TurnPayload] = [
        {"seq": t[0], "session_id": t[1], "role": t[2], "content": t[3], "metadata": t[4],
         "created_at": t[5]}
        for t in turns
    ]  # fmt: skip
    fact_list: list[FactPayload] = [
        {"key": f[0], "value": f[1], "session_id": f[2], "updated_at": f[3], "version": f[4],
         "expires_at": f[5]}
        for f in facts
    ]  # fmt: skip
    return turn_list, fact_list


def fact_payload(fact: Fact) -> FactPayload:
    return fact_payload_from_row(_fact_row(fact))


def fact_payload_from_row(row: tuple[Any, ...]) -> FactPayload:
    """A fact from a ``values_list(*FACT_FIELDS)`` row."""
    return cast(FactPayload, _row_payload(FACT_FIELDS, row, "updated_at", "expires_at"))


def parse_instant(text: str) -> dt.datetime:
    """The aware datetime of an ISO-8601 text that ``isoformat`` wrote."""
    return dt.datetime.fromisoformat(text)


def fact_live(fact: FactPayload, at: dt.datetime) -> bool:
    """Whether ``fact`` is not expired at ``at``."""
    expires_at = fact["expires_at"]
    return expires_at is None or parse_instant(expires_at) > at


def facts_live(facts: list[FactPayload], at: dt.datetime) -> list[FactPayload]:
    """The facts of ``facts`` not expired at ``at`` (the same list when none expires)."""
    if all(fact["expires_at"] is None for fact in facts):
        return facts
    return [fact for fact in facts if fact_live(fact, at)]


SUMMARY_FIELDS = ("text", "through_seq", "tokens", "updated_at")


def summary_payload_from_row(row: tuple[Any, ...]) -> SummaryPayload:
    """A summary from a ``values_list(*SUMMARY_FIELDS)`` row."""
    return cast(SummaryPayload, _row_payload(SUMMARY_FIELDS, row, "updated_at"))


def fact_version_payload(version: FactVersion) -> FactVersionPayload:
    return fact_version_payload_from_row(_fact_version_row(version))


def session_payload(session: Session) -> SessionPayload:
    return session_payload_from_row(_session_row(session))


FACT_VERSION_FIELDS = (
    "key",
    "value",
    "version",
    "session_id",
    "updated_at",
    "source_turn_seq",
    "deleted",
    "actor",
    "expires_at",
)
_fact_version_row = operator.attrgetter(*FACT_VERSION_FIELDS)
SESSION_FIELDS = ("session_id", "first_seen", "last_seen", "turn_count")
_session_row = operator.attrgetter(*SESSION_FIELDS)


def fact_version_payload_from_row(row: tuple[Any, ...]) -> FactVersionPayload:
    """A fact version from a ``values_list(*FACT_VERSION_FIELDS)`` row."""
    return cast(
        FactVersionPayload, _row_payload(FACT_VERSION_FIELDS, row, "updated_at", "expires_at")
    )


def session_payload_from_row(row: tuple[Any, ...]) -> SessionPayload:
    """A session from a ``values_list(*SESSION_FIELDS)`` row."""
    return cast(SessionPayload, _row_payload(SESSION_FIELDS, row, "first_seen", "last_seen"))
