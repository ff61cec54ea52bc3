"""The pieces of an append that both its paths use (``services.turns`` and its PostgreSQL fast
path): the checked input, the extraction's plan, the summary count, the idempotent-retry check, a
turn from a row, the warning of a fact past the cap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Model
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from memory import codec, tokens
from memory.conf import conf
from memory.exceptions import IdempotencyKeyReused
from memory.extraction.base import ExtractedFact
from memory.extraction.base import logger as extraction_logger
from memory.models import Turn


class TurnInput(NamedTuple):
    """One append's checked input, as both of its paths take it."""

    owner_id: str
    session_id: str
    role: str
    content: str
    metadata: dict[str, Any]
    idempotency_key: str | None


class AppendAccess(Protocol):
    """A caller not yet authenticated, whose token the append's own statement reads with the
    permission ``permission`` ("app_label.codename"). ``settle`` gets what it read (``None``: no
    such token) and raises unless the caller reaches the owner; ``require`` checks the caller
    the ordinary way, before any other path reads or writes. Both do it once."""

    key: str
    permission: str

    def settle(self, found: tuple[Any, Any, bool] | None) -> None: ...

    def require(self) -> None: ...


class SummaryCount(NamedTuple):
    """What an append adds to its owner's ``summary_tokens`` (its content's tokens), and the
    count at which a summary refresh is due (``None``: summaries are off, nothing is counted)."""

    tokens: int = 0
    after: int | None = None


def summary_count(content: str) -> SummaryCount:
    """The turn's ``SummaryCount`` by ``MEMORY["TOKEN_COUNTER"]`` while summaries are on. Never
    raises: a failing counter is logged and the turn counts nothing."""
    if conf.SUMMARIZER is None:
        return SummaryCount()
    try:
        return SummaryCount(tokens.count_remembering(content), conf.SUMMARY_AFTER_TOKENS)
    except Exception:
        extraction_logger.exception("Counting a turn's tokens for the summary failed.")
        return SummaryCount()


def retry_checked(existing: Turn, new: TurnInput) -> Turn:
    """The turn first stored under ``new``'s key, if ``new`` repeats it exactly (the metadata
    as the same JSON value, ``codec.json_equal``); else raises ``IdempotencyKeyReused``."""
    same = (existing.session_id, existing.role, existing.content) == new[1:4]
    if not same or not codec.json_equal(existing.metadata, new.metadata):
        raise IdempotencyKeyReused(new.idempotency_key or "", existing)
    return existing


@dataclass(frozen=True)
class AppendPlan:
    """What a turn's extraction asks of its append, found before any write: a record for a deferred
    extractor (``defer``), or what an inline one found and the facts it changes, each with what the
    owner held when read (``facts``; ``None``: none)."""

    defer: bool = False
    found: tuple[ExtractedFact, ...] = ()
    facts: list[dict[str, Any]] | None = None


_M = TypeVar("_M", bound=Model)


def row_loaded(model: type[_M], fields: dict[str, Any]) -> _M:
    """An instance of ``model`` for a row read or written with the app's own SQL, as the ORM
    loads one: ``fields`` by attribute name (``owner_id``, not ``owner``); a field not given is
    deferred, loaded on first access as after ``QuerySet.only()``."""
    if pre_init.has_listeners(model) or post_init.has_listeners(model):
        obj = model(**fields)
    else:
        # NOTE: Model.__init__ costs an append about 30 us a call (its loop over every field and
        # keyword); with no init signal to send, what it leaves is the same.
        obj = model.__new__(model)
        obj._state = ModelState()
        obj.__dict__.update(fields)
    obj._state.adding = False
    obj._state.db = DEFAULT_DB_ALIAS
    return obj


def turn_loaded(**fields: Any) -> Turn:
    """A ``Turn`` for a row this module read or wrote with its own SQL, as the ORM loads one."""
    return row_loaded(Turn, fields)


def fact_cap_warn(key: str, seq: int, owner_id: str) -> None:
    extraction_logger.warning(
        "Extracted fact %r of turn %s of %r skipped: the owner holds "
        "MEMORY['MAX_FACTS'] (%s) facts.",
        key,
        seq,
        owner_id,
        conf.MAX_FACTS,
    )
