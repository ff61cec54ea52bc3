"""Pages of an owner's sessions, most recently seen first."""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import ValidationError
from django.db.models import (
    Q,
)

import memory.selectors.pages as pages
from memory import aio
from memory.exceptions import database_guard
from memory.models import Session
from memory.payloads import (
    SessionPayload,
    session_payload,
)
from memory.selectors.pages import DEFAULT_PAGE_SIZE, Page


@database_guard()
def session_list(
    *, owner_id: str, limit: int = DEFAULT_PAGE_SIZE, cursor: str | None = None
) -> Page[SessionPayload]:
    """A page of the owner's sessions, most recently seen first (ties by ``session_id``), and the
    next page's cursor (``None`` on the last).

    ``limit`` is 1-500; ``cursor`` a ``next_cursor`` of an earlier page; every page costs the
    same (keyset on ``memory_session_page_idx``). A session that gets a turn during a walk moves
    to the front, where the walk may miss it. Raises ``ValidationError`` ({"user_id" | "limit" |
    "cursor": messages}) for bad input and ``MemoryUnavailable`` when the database cannot be
    reached.
    """
    pages.check_owner(owner_id)
    pages.check_limit(limit)
    sessions = Session.objects.filter(owner_id=pages.owner_pk(owner_id))
    if cursor is not None:
        last_seen, session_id = pages.cursor_decode(cursor, ("sessions", owner_id), (str, str))
        try:
            seen = dt.datetime.fromisoformat(last_seen)
            if seen.tzinfo is None:
                raise ValueError(last_seen)
        except ValueError as e:
            raise ValidationError({"cursor": ["Invalid cursor."]}) from e
        # NOTE: the redundant ``last_seen <= seen`` starts the index scan at the cursor.
        sessions = sessions.filter(
            Q(last_seen__lt=seen) | Q(last_seen=seen, session_id__gt=session_id),
            last_seen__lte=seen,
        )
    rows = list(sessions.order_by("-last_seen", "session_id")[: limit + 1])
    page = [session_payload(session) for session in rows[:limit]]
    more = len(rows) > limit
    last = rows[limit - 1] if more else None
    if last is None:
        return Page(page, None)
    return Page(
        page,
        pages.cursor_encode(("sessions", owner_id), last.last_seen.isoformat(), last.session_id),
    )


asession_list = aio.twin(session_list)
