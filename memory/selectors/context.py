"""The context: facts and the newest turns, read through the Redis copy; and as model messages,
with the owner's summary where the turns sent do not reach back to it."""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any, Literal

from django.core.exceptions import ValidationError
from django.db import DEFAULT_DB_ALIAS
from django.utils import timezone

from memory import aio, cache, codec, tokens, when
from memory.conf import conf
from memory.exceptions import database_guard
from memory.models import Fact, Owner, Summary, Turn, fact_live
from memory.payloads import (
    FACT_FIELDS,
    SUMMARY_FIELDS,
    TURN_FIELDS,
    ContextMessagesPayload,
    ContextPayload,
    MessagePayload,
    SummaryPayload,
    TurnPayload,
    fact_payload_from_row,
    summary_payload_from_row,
    turn_payload_from_row,
)
from memory.postgres import context_read
from memory.selectors.pages import check_owner
from memory.selectors.search import (
    QueryEmbedding,
    aturns_recalled,
    clean_min_score,
    recall_begin,
    turns_recalled,
)


def _context(
    owner_id: str, memory: cache.Snapshot, source: Literal["cache", "database"]
) -> ContextPayload:
    return {
        "user_id": owner_id,
        "facts": {fact["key"]: fact["value"] for fact in memory.facts},
        "turns": memory.turns,
        "source": source,
    }


def database_read(owner_id: str, turns: int, at: dt.datetime | None = None) -> cache.Loaded:
    """The owner's stamp, last ``turns`` turns, facts not expired at ``at`` (default: now) and
    summary; and whether those are all its turns.

    Four queries whatever the history length; on PostgreSQL one statement
    (``memory.postgres.context_read``).
    With ``MEMORY["READ_DATABASE"]``, read from that replica when it holds the owner's last
    acknowledged write, else from the primary (``cache.replica_read``).
    """
    at = timezone.now() if at is None else at
    return cache.replica_read(
        owner_id, lambda using: database_read_on(owner_id, turns, at, using=using)
    )


def database_read_on(
    owner_id: str, turns: int, at: dt.datetime, *, using: str = DEFAULT_DB_ALIAS
) -> cache.Loaded:
    """``database_read`` on the database ``using``, whatever it holds."""
    if context_read.context_read_usable(using):
        return context_read.context_read(owner_id, turns, at, using)
    return django_read(owner_id, turns, at, using=using)


def django_read(
    owner_id: str, turns: int, at: dt.datetime, *, using: str = DEFAULT_DB_ALIAS
) -> cache.Loaded:
    """``database_read`` through the ORM: its specification, and its path off PostgreSQL."""
    row = Owner.objects.using(using).filter(external_id=owner_id).values_list("pk", "stamp").first()
    if row is None:
        return cache.Loaded(cache.Snapshot(stamp=0, turns=[], facts=[]), True)
    owner_pk, stamp = row
    rows = list(
        Turn.objects.using(using)
        .filter(owner_id=owner_pk)
        .order_by("-seq")
        .values_list(*TURN_FIELDS)[:turns]
    )
    rows.reverse()
    facts = [
        fact_payload_from_row(fact)
        for fact in Fact.objects.using(using)
        .filter(fact_live(at), owner_id=owner_pk)
        .order_by("key")
        .values_list(*FACT_FIELDS)
    ]
    summary = (
        Summary.objects.using(using).filter(owner_id=owner_pk).values_list(*SUMMARY_FIELDS).first()
    )
    memory = cache.Snapshot(
        stamp=stamp,
        turns=[turn_payload_from_row(turn) for turn in rows],
        facts=facts,
        summary=summary_payload_from_row(summary) if summary is not None else None,
    )
    return cache.Loaded(memory, len(rows) < turns)


@database_guard()
def context_get(*, owner_id: str, turns: int | None = None) -> ContextPayload:
    """What a chat backend puts before the model: the owner's facts and last ``turns`` turns.

    ``turns`` defaults to ``MEMORY["CONTEXT_TURNS"]``, 0..``MAX_CONTEXT_TURNS``. A warm cache
    answers with no query (``source: "cache"``); a miss or a failing Redis gives the same answer
    from the database (``source: "database"``) in a bounded number of queries. An unknown owner has
    an empty context. Raises ``ValidationError`` for a bad owner id or turn count and
    ``MemoryUnavailable`` when the database cannot be reached.
    """
    return _context(owner_id, *_read(owner_id, turns))


def _read(owner_id: str, turns: int | None) -> tuple[cache.Snapshot, cache.Source]:
    n = _context_turns(owner_id, turns)
    with database_guard():
        return cache.read_through(
            owner_id=owner_id, turns=n, load=functools.partial(database_read, owner_id)
        )


async def _aread(owner_id: str, turns: int | None) -> tuple[cache.Snapshot, cache.Source]:
    n = _context_turns(owner_id, turns)
    with database_guard():
        return await cache.aread_through(
            owner_id=owner_id, turns=n, load=functools.partial(database_read, owner_id)
        )


def _context_turns(owner_id: str, turns: int | None) -> int:
    """Check a context's arguments; return how many turns it holds."""
    check_owner(owner_id)
    n = conf.CONTEXT_TURNS if turns is None else turns
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= conf.MAX_CONTEXT_TURNS:
        raise ValidationError(
            {"turns": [f"Ensure this value is between 0 and {conf.MAX_CONTEXT_TURNS}."]}
        )
    return n


@aio.twin_of(context_get)
async def acontext_get(*, owner_id: str, turns: int | None = None) -> ContextPayload:
    # NOTE: not aio.twin: a warm read is natively async; a cold one takes one thread hop.
    return _context(owner_id, *await _aread(owner_id, turns))


def _max_tokens_check(max_tokens: int | None) -> None:
    if max_tokens is not None and (
        not isinstance(max_tokens, int)
        or isinstance(max_tokens, bool)
        or not 1 <= max_tokens <= tokens.MAX_TOKENS
    ):
        raise ValidationError(
            {"max_tokens": [f"Ensure this value is between 1 and {tokens.MAX_TOKENS}."]}
        )


def _messages_turns(max_tokens: int | None, turns: int | None) -> int | None:
    """How many turns ``context_messages`` reads: as asked; with a budget, at most them all."""
    return conf.MAX_CONTEXT_TURNS if turns is None and max_tokens is not None else turns


def _facts_text(facts: dict[str, Any]) -> str:
    """The owner's facts as the context's system message: ``- key: value`` lines, by key. A string
    with a control character is written as JSON, so no value can pose as another line."""
    if not facts:
        return "Known facts about the user: none yet."
    lines = ["Known facts about the user:"]
    for key, value in facts.items():
        plain = isinstance(value, str) and value.isprintable()
        text = value if plain else codec.dumps(value).decode()
        lines.append(f"- {key}: {text}")
    return "\n".join(lines)


def summary_text(summary: SummaryPayload) -> str:
    """The owner's summary as the text of the context's second system message."""
    return (
        f"Summary of the earlier conversation (turns 1-{summary['through_seq']}):\n"
        f"{summary['text']}"
    )


def _newest_fitting(
    turns: list[TurnPayload], count: tokens.TokenCounter, budget: int | None
) -> tuple[list[TurnPayload], int]:
    """The newest of ``turns`` that fit in ``budget`` tokens (all without one), whole and in order,
    and what they count."""
    kept: list[TurnPayload] = []
    used = 0
    for turn in reversed(turns):
        cost = count(turn["content"])
        if budget is not None and used + cost > budget:
            # NOTE: no gap: an older turn after one that did not fit would be a reply without its
            # question.
            break
        used += cost
        kept.append(turn)
    kept.reverse()
    return kept, used


def recalled_line(turn: TurnPayload) -> str:
    """One recalled turn as a line of the third system message: seq, date, session, role,
    content."""
    return (
        f"- turn {turn['seq']} ({turn['created_at'][:10]}, session {turn['session_id']}), "
        f"{turn['role']}: {turn['content']}"
    )


def recalled_text(turns: list[TurnPayload]) -> str:
    """Recalled older turns as the text of the context's third system message, oldest first."""
    lines = [
        "Earlier turns of the conversation that bear on the question, oldest first (where "
        "they disagree, the later one is current):"
    ]
    lines.extend(recalled_line(turn) for turn in turns)
    return "\n".join(lines)


def _counted_once(count: tokens.TokenCounter) -> tokens.TokenCounter:
    """``count``, each text counted once: a plan fits the turns it kept again after each system
    message it adds."""
    known: dict[str, int] = {}

    def counted(text: str) -> int:
        found = known.get(text)
        if found is None:
            found = known[text] = count(text)
        return found

    return counted


class _Plan:
    """What ``context_messages`` sends: the system messages, the budget left, the turns kept and
    what they count."""

    def __init__(self, memory: cache.Snapshot, context: ContextPayload, max_tokens: int | None):
        self.count = _counted_once(tokens.counter_remembering())
        facts = _facts_text(context["facts"])
        self.used = self.count(facts)
        if max_tokens is not None and self.used > max_tokens:
            raise ValidationError(
                {
                    "max_tokens": [
                        f"The user's facts alone take {self.used} tokens, more than "
                        f"{max_tokens}: ask for at least that many."
                    ]
                }
            )
        self.head: list[MessagePayload] = [{"role": "system", "content": facts}]
        self.budget = None if max_tokens is None else max_tokens - self.used
        self.kept, self.cost = _newest_fitting(context["turns"], self.count, self.budget)
        self.through_seq: int | None = None
        self.recalled: list[int] = []
        self.window = len(context["turns"])
        summary = memory.summary
        if summary is not None and (not self.kept or self.kept[0]["seq"] > summary["through_seq"]):
            text = summary_text(summary)
            # NOTE: a summary that does not fit beside the facts is left out rather than cut.
            if self._take(text):
                self.through_seq = summary["through_seq"]

    def _take(self, text: str) -> bool:
        """Add a system message of ``text`` if it fits, keeping the newest turns that still fit."""
        cost = self.count(text)
        if self.budget is not None and cost > self.budget:
            return False
        self.head.append({"role": "system", "content": text})
        self.used += cost
        if self.budget is not None:
            self.budget -= cost
            self.kept, self.cost = _newest_fitting(self.kept, self.count, self.budget)
        return True

    def before_seq(self) -> int | None:
        """The seq the recalled turns must be older than: the oldest turn kept."""
        return self.kept[0]["seq"] if self.kept else None

    def recall(self, found: list[TurnPayload]) -> None:
        """Add the best of ``found`` as the third message: as many as fit in a third of the budget
        left, or without one at most ``MEMORY["RECALL_TURNS"]``."""
        share = None if self.budget is None else self.budget // 3
        chosen: list[TurnPayload] = []
        spent = 0
        for turn in found:
            if share is None and len(chosen) == conf.RECALL_TURNS:
                break
            cost = self.count(recalled_line(turn))
            if share is not None and spent + cost > share:
                continue
            chosen.append(turn)
            spent += cost
        while chosen:
            chosen.sort(key=lambda turn: turn["seq"])
            if self._take(recalled_text(chosen)):
                self.recalled = [turn["seq"] for turn in chosen]
                return
            # The heading did not fit with them: one turn fewer, the least relevant.
            chosen = sorted(chosen, key=lambda turn: found.index(turn))[:-1]

    def payload(self, context: ContextPayload) -> ContextMessagesPayload:
        messages = list(self.head)
        messages.extend([{"role": turn["role"], "content": turn["content"]} for turn in self.kept])
        return {
            "user_id": context["user_id"],
            "messages": messages,
            "facts": context["facts"],
            "source": context["source"],
            "tokens": self.used + self.cost,
            "summary_through_seq": self.through_seq,
            "recalled": self.recalled,
        }


def _recall_check(now: Any, min_score: Any) -> None:
    when.when_parse(now, field="now")
    clean_min_score(min_score)


# Most turns a context's recall searches for under a token budget.
RECALL_CANDIDATES = 20


def _recall_args(
    plan: _Plan,
    owner_id: str,
    query: str,
    now: Any,
    min_score: float | None,
    begun: QueryEmbedding | None,
) -> dict[str, Any]:
    return {
        "owner_id": owner_id,
        "query": query,
        "before_seq": plan.before_seq(),
        "limit": conf.RECALL_TURNS if plan.budget is None else RECALL_CANDIDATES,
        "now": now,
        "min_score": min_score,
        "begun": begun,
    }


def _messages(
    owner_id: str,
    max_tokens: int | None,
    turns: int | None,
    query: str | None,
    now: Any,
    min_score: float | None,
    /,
) -> aio.Steps[ContextMessagesPayload]:
    """``context_messages`` between its reads: the owner's context, then the recall."""
    _max_tokens_check(max_tokens)
    _recall_check(now, min_score)
    # NOTE: the query's embedding runs while the context is read (no I/O here).
    begun = None if query is None else recall_begin(owner_id=owner_id, query=query, now=now)
    n = _messages_turns(max_tokens, turns)
    memory, source = yield aio.Step(lambda: _read(owner_id, n), lambda: _aread(owner_id, n))
    context = _context(owner_id, memory, source)
    plan = _Plan(memory, context, max_tokens)
    if query is not None:
        args = _recall_args(plan, owner_id, query, now, min_score, begun)
        plan.recall(
            (yield aio.Step(lambda: turns_recalled(**args), lambda: aturns_recalled(**args)))
        )
    return plan.payload(context)


def context_messages(
    *,
    owner_id: str,
    max_tokens: int | None = None,
    turns: int | None = None,
    query: str | None = None,
    now: Any = None,
    min_score: float | None = None,
) -> ContextMessagesPayload:
    """The owner's context as the messages an LLM chat API takes, oldest first.

    A system message of the facts (``- key: value`` lines; "none yet"); the owner's summary, when
    the turns sent do not reach back to it and it fits (``summary_through_seq``); with ``query``,
    the older turns ``turn_search`` finds most relevant, in a third of the tokens left or at most
    ``MEMORY["RECALL_TURNS"]`` (``recalled``); then one message per turn, content kept exactly. With
    ``max_tokens`` the turns are the newest that fit beside the system messages, whole and without
    gaps; ``tokens`` (by ``MEMORY["TOKEN_COUNTER"]``) never exceeds it.

    Raises ``ValidationError`` for a bad owner id, ``turns``, ``max_tokens``, ``query``, ``now`` or
    ``min_score``, and ({"max_tokens": ...}) when the facts alone exceed ``max_tokens`` (facts are
    never cut); ``MemoryUnavailable`` when the database cannot be reached, ``SearchTimeout`` when
    the recall ran past its limit, ``ImproperlyConfigured`` for a bad ``MEMORY["TOKEN_COUNTER"]``.
    """
    return aio.steps_run(_messages(owner_id, max_tokens, turns, query, now, min_score))


acontext_messages = aio.steps_twin(context_messages, _messages)
