"""A time a question names relative to an event the owner told about ("the week before my
trip"): the event dated by the owner's own turn that best matches it, and the search narrowed to
the window around that date (``memory.when.Event``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import connections

from memory import ranking, when
from memory.models import Turn
from memory.recall import embedders, vectors

# The owner's best turns for the event, by words and by meaning, that its date is looked for
# among; how well the turn that dates it must match: how much of the event's words it holds
# (``WordRanking.coverage``) plus how near its meaning is (centred cosine), each in [0, 1].
EVENT_LOOKUP = 5
EVENT_MIN_MATCH = 0.4


class EventFilters(ranking.TurnFilters):
    """``TurnFilters`` that also carry the event a question names, asked at ``now``: narrowed to
    its window by ``event_narrowed`` once the event is dated. ``embedding``: the event's words
    embedded (a ``QueryEmbedding``), where a search by meaning began it."""

    def __init__(self, *, event: when.Event, now: dt.datetime, **filters: Any):
        super().__init__(**filters)
        self.event = event
        self.now = now
        self.embedding: Any = None


_TOLD_SQL = f"SELECT id, created_at FROM {Turn._meta.db_table} WHERE id = ANY(%s) AND role = 'user'"


def _matches(owner: tuple[int, int, int], filters: EventFilters) -> dict[int, float]:
    """How well the owner's best turns for the event match it, by pk: by words plus by meaning."""
    using = Turn.objects.db
    owner_pk, embedded, last_seq = owner
    lookup = ranking.TurnFilters(before_seq=filters.before_seq, before=filters.now)
    top_seq = last_seq if filters.before_seq is None else min(last_seq, filters.before_seq - 1)
    words = ranking.words_ranked(
        using=using,
        owner_pk=owner_pk,
        q=filters.event.phrase,
        top_seq=top_seq,
        depth=EVENT_LOOKUP,
        filters=lookup,
        held=True,
    )
    match = {pk: words.coverage(length, terms) for pk, _, length, terms in words.hits}
    vector = None if filters.embedding is None else filters.embedding.vector()
    embedder = embedders.embedder_get()
    if vector is not None and embedder is not None:
        model = embedders.embedder_name(embedder)
        centre = vectors.owner_centre(using, owner_pk, model, embedded=embedded)
        nearest = vectors.vectors_nearest(
            using,
            owner_pk,
            model,
            vector,
            EVENT_LOOKUP,
            embedded=embedded,
            filters=lookup,
            centre=centre,
        )
        for pk, distance in nearest:
            match[pk] = match.get(pk, 0.0) + max(0.0, 1.0 - distance)
    return match


def event_narrowed(owner: tuple[int, int, int], filters: EventFilters) -> ranking.TurnFilters:
    """``filters`` narrowed to the event's window around the date of the owner's own turn, told
    before ``now``, that matches it best (``_matches``, at least ``EVENT_MIN_MATCH``); as they
    are where none does. In the caller's search transaction."""
    plain = ranking.TurnFilters(
        before_seq=filters.before_seq, after=filters.after, before=filters.before
    )
    match = _matches(owner, filters)
    good = [pk for pk, value in match.items() if value >= EVENT_MIN_MATCH]
    if not good:
        return plain
    with connections[Turn.objects.db].cursor() as cursor:
        cursor.execute(_TOLD_SQL, [good])
        told = dict(cursor.fetchall())
    if told:
        best = max(told, key=lambda pk: (match[pk], pk))
        plain.after, plain.before = filters.event.window(told[best], filters.now)
    return plain
