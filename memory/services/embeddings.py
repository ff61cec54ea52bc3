"""Writes of the turns' vectors: an owner's embedding run, in bounded batches of one transaction
each, run by a deferred task (``memory.services.deferred``) or ``manage.py memory_embed``. Vectors
are derived data: a turn whose task never ran is embedded by a later run."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from memory import aio, counters
from memory.conf import conf
from memory.exceptions import database_guard
from memory.models import Owner, Turn
from memory.postgres import sql
from memory.recall import embedders, vectors
from memory.services.common import field_check
from memory.validators import validate_owner_id

logger = logging.getLogger("memory.recall")


# The vectors of the last texts this process embedded: a repeated text reuses its vector.
_recent = embedders.RecentVectors()


def batch_vectors(
    embedder: Any, model: str, rows: Sequence[tuple[int, str]]
) -> tuple[list[int], list[list[float]], dict[str, int]]:
    """The vectors of a batch of turns ``(pk, content)``: ``(pks, vectors, counts)``. An ack-only
    turn gets none; a text met already is embedded once. ``counts``: ``embedded``, ``duplicate``,
    ``skipped``."""
    pks: list[int] = []
    texts: list[str] = []
    for pk, content in rows:
        if embedders.passage_worth_embedding(content):
            pks.append(pk)
            texts.append(content)
    known: dict[str, list[float]] = {}
    fresh: list[str] = []
    for text in texts:
        if text in known or text in fresh:
            continue
        vector = _recent.get((model, text))
        if vector is None:
            fresh.append(text)
        else:
            known[text] = vector
    if fresh:
        for text, vector in zip(fresh, embedders.passages_embed(embedder, fresh), strict=True):
            known[text] = vector
            _recent.put((model, text), vector)
    counts = {
        "embedded": len(fresh),
        "duplicate": len(texts) - len(fresh),
        "skipped": len(rows) - len(texts),
    }
    return pks, [known[text] for text in texts], counts


def _owner_state(owner_id: str) -> tuple[int, int, int] | None:
    return (
        Owner.objects.filter(external_id=owner_id)
        .values_list("pk", "embedded_seq", "last_seq")
        .first()
    )


def turns_embed(*, owner_id: str, limit: int | None = None) -> int:
    """Embed the owner's turns after its ``embedded_seq``, oldest first, after their facts
    (``facts_embed``); return how many turn vectors were written, at most ``limit`` when given.

    Embeds ``MEMORY["EMBED_BATCH_TURNS"]`` turns at a time outside any transaction, then writes the
    batch and its ``embedded_seq`` in one: a run stopped anywhere resumes after its last batch. Past
    ``vectors.INDEX_FROM`` turns it builds the model's HNSW index where missing. Does nothing while
    ``vectors.embeddings_on`` is false. Raises ``ValidationError`` for a bad owner id,
    ``MemoryUnavailable`` when the database cannot be reached, and what the embedder raises
    (``ImproperlyConfigured`` for vectors of the wrong shape).
    """
    field_check("user_id", validate_owner_id, owner_id)
    with database_guard():
        if not vectors.embeddings_on(DEFAULT_DB_ALIAS):
            return 0
    embedder = embedders.embedder_get()
    assert embedder is not None
    model = embedders.embedder_name(embedder)
    batch = conf.EMBED_BATCH_TURNS
    with database_guard():
        state = _owner_state(owner_id)
    if state is None:
        return 0
    facts_embed(state[0], embedder, model)
    written = 0
    while limit is None or written < limit:
        with database_guard():
            state = _owner_state(owner_id)
            if state is None:
                return written
            owner_pk, embedded_seq, last_seq = state
            if embedded_seq >= last_seq:
                return written
            size = batch if limit is None else min(batch, limit - written)
            rows = list(
                Turn.objects.filter(owner_id=owner_pk, seq__gt=embedded_seq, seq__lte=last_seq)
                .order_by("seq")
                .values_list("pk", "seq", "content", "created_at")[:size]
            )
        # NOTE: every turn up to last_seq is committed, so a short batch covers the rest.
        through = rows[-1][1] if len(rows) == size else last_seq
        pks, found, counts = batch_vectors(
            embedder, model, [(pk, content) for pk, _, content, _ in rows]
        )
        with database_guard():
            try:
                with transaction.atomic():
                    if pks:
                        written += vectors.vectors_write(DEFAULT_DB_ALIAS, model, pks, found)
                    moved = Owner.objects.filter(pk=owner_pk).update(
                        embedded_seq=Greatest("embedded_seq", through)
                    )
            except IntegrityError:
                # The owner was forgotten between the read and the write.
                return written
        if rows:
            oldest = min(created_at for _, _, _, created_at in rows)
            counters.embedding_batch(
                **counts, lag_seconds=(timezone.now() - oldest).total_seconds()
            )
        if not moved:
            return written
        if through > vectors.INDEX_FROM and found:
            with database_guard():
                vectors.vectors_index(DEFAULT_DB_ALIAS, model, len(found[0]))
    return written


aturns_embed = aio.twin(turns_embed)


def facts_embed(owner_pk: int, embedder: Any, model: str) -> int:
    """Embed the owner's facts whose current version has no vector of ``model``, in batches of
    ``MEMORY["EMBED_BATCH_TURNS"]`` of one transaction each; return how many were written. A fact
    changed while embedded is left for the next run."""
    written = 0
    # NOTE: the facts a pass could not write (changed meanwhile) are not read again.
    for _ in range(conf.MAX_FACTS // conf.EMBED_BATCH_TURNS + 2):
        with database_guard():
            due = vectors.facts_due(DEFAULT_DB_ALIAS, owner_pk, model, conf.EMBED_BATCH_TURNS)
        if not due:
            break
        found = embedders.passages_embed(
            embedder, [vectors.fact_text(key, value) for _, _, key, value in due]
        )
        with database_guard(), transaction.atomic():
            done = vectors.facts_write(
                DEFAULT_DB_ALIAS, model, [(pk, version) for pk, version, _, _ in due], found
            )
        written += done
        if done < len(due):
            break
    return written


def vectors_create(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Create pgvector and the vector tables in ``using`` now, with the migration's own function
    (``manage.py memory_embed --setup``: the server got the extension after the migration ran);
    return whether they exist. Nothing is created where the extension cannot be."""
    with transaction.atomic(using), connections[using].schema_editor() as editor:
        ready = sql.vectors_setup(editor)
    vectors.vectors_forget_ready()
    return ready


def embeddings_backfill(*, limit: int | None = None) -> int:
    """Embed the turns of every owner behind (``embedded_seq`` below ``last_seq``), in pk order, at
    most ``limit`` turns in all; return how many. A run stopped anywhere loses at most one batch."""
    done = 0
    after_pk = 0
    while limit is None or done < limit:
        with database_guard():
            behind = list(
                Owner.objects.filter(pk__gt=after_pk, embedded_seq__lt=F("last_seq"))
                .order_by("pk")
                .values_list("pk", "external_id")[:500]
            )
        if not behind:
            return done
        for pk, owner_id in behind:
            done += turns_embed(owner_id=owner_id, limit=None if limit is None else limit - done)
            if limit is not None and done >= limit:
                return done
            after_pk = pk
    return done


def embeddings_restale() -> int:
    """Make every owner's vectors due again (after ``MEMORY["EMBEDDER"]`` changed model); return how
    many owners. Old vectors are ignored until replaced."""
    total = 0
    after = 0
    while True:
        with database_guard():
            pks = list(
                Owner.objects.filter(pk__gt=after, embedded_seq__gt=0)
                .order_by("pk")
                .values_list("pk", flat=True)[:500]
            )
            if not pks:
                return total
            total += Owner.objects.filter(pk__in=pks).update(embedded_seq=0)
        after = pks[-1]
