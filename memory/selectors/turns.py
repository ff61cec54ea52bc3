"""Pages of an owner's turns, in order, cut by count and by bytes."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import (
    F,
    Func,
    IntegerField,
    QuerySet,
)
from django.db.models.functions import Length

from memory import aio
from memory.exceptions import database_guard
from memory.models import Owner, Turn
from memory.payloads import (
    TURN_FIELDS,
    TurnPayload,
    turn_payload_from_row,
)
from memory.selectors.pages import DEFAULT_PAGE_SIZE, check_limit, check_owner, owner_pk


@database_guard()
def turn_list(
    *,
    owner_id: str,
    session_id: str | None = None,
    after: int | None = None,
    limit: int = DEFAULT_PAGE_SIZE,
    max_bytes: int | None = None,
) -> tuple[list[TurnPayload], bool]:
    """A page of the owner's turns, oldest first, with ``seq > after``; and whether more follow.

    Keyset pagination: every page costs the same. ``session_id`` keeps that session's turns;
    ``limit`` is 1-500. With ``max_bytes`` the page also ends before its contents pass that many
    bytes, holding at least one turn (one more query). Raises ``ValidationError`` ({"user_id" |
    "after" | "limit" | "max_bytes": messages}) for bad input and ``MemoryUnavailable`` when the
    database cannot be reached.
    """
    check_owner(owner_id)
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
        raise ValidationError({"after": ["Ensure this value is an integer >= 0."]})
    check_limit(limit)
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1
    ):
        raise ValidationError({"max_bytes": ["Ensure this value is an integer >= 1."]})
    turns = turn_page_queryset(owner_id, session_id=session_id, after=after)
    if max_bytes is not None:
        sizes = list(turns.annotate(size=_content_bytes()).values_list("seq", "size")[: limit + 1])
        fit = _page_fit([size for _, size in sizes[:limit]], max_bytes)
        if fit < len(sizes):
            rows = list(turns.filter(seq__lte=sizes[fit - 1][0]).values_list(*TURN_FIELDS)[:fit])
            return [turn_payload_from_row(row) for row in rows], True
    rows = list(turns.values_list(*TURN_FIELDS)[: limit + 1])
    return [turn_payload_from_row(row) for row in rows[:limit]], len(rows) > limit


@database_guard()
def turn_tail(*, owner_id: str, limit: int | None = None) -> list[TurnPayload]:
    """The owner's newest ``limit`` turns, oldest first; every turn of the owner when
    ``limit`` is ``None``. From the database, in one query, however many turns that is. Raises
    ``ValidationError`` ({"user_id" | "limit": messages}) for bad input and
    ``MemoryUnavailable`` when the database cannot be reached."""
    check_owner(owner_id)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValidationError({"limit": ["Ensure this value is an integer >= 0."]})
    turns = Turn.objects.filter(owner_id=owner_pk(owner_id))
    if limit is None:
        rows = list(turns.order_by("seq").values_list(*TURN_FIELDS))
    else:
        rows = list(turns.order_by("-seq").values_list(*TURN_FIELDS)[:limit])[::-1]
    return [turn_payload_from_row(row) for row in rows]


aturn_tail = aio.twin(turn_tail)


@database_guard()
def turn_by_key_get(*, owner_id: str, idempotency_key: str) -> TurnPayload | None:
    """The owner's turn stored under ``idempotency_key``, or ``None``. Raises ``ValidationError``
    ({"user_id": messages}) for a bad owner id and ``MemoryUnavailable`` when the database cannot be
    reached."""
    check_owner(owner_id)
    row = (
        Turn.objects.filter(owner_id=owner_pk(owner_id), idempotency_key=idempotency_key)
        .values_list(*TURN_FIELDS)
        .first()
    )
    return turn_payload_from_row(row) if row is not None else None


aturn_by_key_get = aio.twin(turn_by_key_get)


@database_guard()
def owner_last_seq(*, owner_id: str) -> int:
    """The ``seq`` of the owner's last turn (0 when none). Raises ``ValidationError`` for a bad
    owner id and ``MemoryUnavailable`` when the database cannot be reached."""
    check_owner(owner_id)
    last = Owner.objects.filter(external_id=owner_id).values_list("last_seq", flat=True).first()
    return last or 0


aowner_last_seq = aio.twin(owner_last_seq)


def _content_bytes() -> Func | Length:
    # NOTE: octet_length reads a long content's size from its TOAST pointer, not the content.
    if connection.vendor == "postgresql":
        return Func(F("content"), function="octet_length", output_field=IntegerField())
    return Length("content")


def _page_fit(sizes: list[int], max_bytes: int) -> int:
    """How many of the first ``sizes`` fit in ``max_bytes`` together; at least one."""
    used = 0
    for fit, size in enumerate(sizes):
        if fit and used + size > max_bytes:
            return fit
        used += size
    return len(sizes)


aturn_list = aio.twin(turn_list)


def turn_page_queryset(
    owner_id: str, *, session_id: str | None, after: int | None
) -> QuerySet[Turn]:
    # NOTE: the owner's pk as a scalar subquery, not a join: with a join Postgres sorted every turn
    # after ``after`` per page; this way it walks the index and stops at ``limit``.
    turns = Turn.objects.filter(owner_id=owner_pk(owner_id))
    if session_id is not None:
        turns = turns.filter(session_id=session_id)
    if after is not None:
        turns = turns.filter(seq__gt=after)
    return turns.order_by("seq")
