"""Loading an ``EvalSet`` into throwaway owners (one per conversation, through
``services.memory_import``) and measuring the search on it, with the baselines ``bm25``,
``dense`` and ``bm25+dense`` where asked (``manage.py memory_eval``; docs/recall.md)."""

from __future__ import annotations

import datetime as dt
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError

from memory.evaluation.files import LOCOMO, EvalSet
from memory.evaluation.metrics import (
    Bm25,
    evidence_recall,
    retrieval_scores,
    rrf,
    session_scores,
)
from memory.exceptions import SearchTimeout

DEPTH = 100
ADVERSARIAL = "5"
BASELINES = ("bm25", "dense", "bm25+dense")
_OWNER_CHARS = re.compile(r"[^A-Za-z0-9_\-.@:]")


@dataclass
class Ranked:
    question: int
    system: str
    ranking: list[str]
    seconds: float | None


@dataclass
class EvalRun:
    evalset: EvalSet
    systems: list[str]
    ranked: list[Ranked] = field(default_factory=list)
    owners: dict[str, str] = field(default_factory=dict)
    cut: int = 0
    refused: int = 0
    timed_out: int = 0
    load_seconds: float = 0.0
    embed_seconds: float = 0.0


def eval_owner_id(*, prefix: str, key: str) -> str:
    """The owner id of conversation ``key``: ``prefix`` and the key, with any character an owner
    id may not hold as ``_``."""
    return (prefix + _OWNER_CHARS.sub("_", key))[:128]


def _document(run: EvalRun, owner_id: str, key: str) -> tuple[dict[str, Any], dict[int, str]]:
    from memory.conf import conf
    from memory.selectors.export import EXPORT_FORMAT, EXPORT_VERSION

    limit = conf.MAX_TURN_CHARS
    turns: list[dict[str, Any]] = []
    sessions: list[dict[str, Any]] = []
    keys: dict[int, str] = {}
    base = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    for s in run.evalset.conversations[key]:
        start = s.at or base
        for i, turn in enumerate(s.turns):
            content = turn.content.replace("\x00", "")
            if len(content) > limit:
                content = content[:limit]
                run.cut += 1
            seq = len(turns) + 1
            keys[seq] = turn.key
            role = turn.role if turn.role in ("user", "assistant", "system", "tool") else "user"
            at = (start + dt.timedelta(seconds=30 * i)).isoformat()
            turns.append(
                {
                    "seq": seq,
                    "session_id": s.key[:128] or "-",
                    "role": role,
                    "content": content,
                    "metadata": {"eval_id": turn.key[:200]},
                    "created_at": at,
                }
            )
        if s.turns:
            sessions.append(
                {
                    "session_id": s.key[:128] or "-",
                    "first_seen": start.isoformat(),
                    "last_seen": turns[-1]["created_at"],
                    "turn_count": len(s.turns),
                }
            )
    # NOTE: a session id said twice (a file's duplicate) is one session of the owner.
    merged: dict[str, dict[str, Any]] = {}
    for session in sessions:
        if session["session_id"] in merged:
            kept = merged[session["session_id"]]
            kept["turn_count"] += session["turn_count"]
            kept["first_seen"] = min(kept["first_seen"], session["first_seen"])
            kept["last_seen"] = max(kept["last_seen"], session["last_seen"])
        else:
            merged[session["session_id"]] = dict(session)
    document = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "user_id": owner_id,
        "exported_at": dt.datetime.now(dt.UTC).isoformat(),
        "facts": [],
        "fact_history": [],
        "turns": turns,
        "sessions": list(merged.values()),
        "summary": None,
    }
    return document, keys


def _dense(owner_id: str, query: str, keys: dict[int, str]) -> list[str]:
    """The owner's turns by exact cosine distance of their stored vectors to ``query``'s."""
    from django.db import connection

    from memory.recall import embedders

    embedder = embedders.embedder_get()
    assert embedder is not None
    vector = embedders.query_embed(embedder, query)
    literal = "[" + ",".join(f"{x:.6g}" for x in vector) + "]"
    with connection.cursor() as cursor:
        # NOTE: "+ 0" keeps the planner off an approximate index: the baseline is exact.
        cursor.execute(
            "SELECT t.seq FROM memory_turnvector AS v JOIN memory_turn AS t ON t.id = v.turn_id"
            " JOIN memory_owner AS o ON o.id = v.owner_id"
            " WHERE o.external_id = %s AND v.model = %s"
            " ORDER BY (v.vector::halfvec <=> %s::halfvec) + 0 LIMIT %s",
            [owner_id, embedders.embedder_name(embedder), literal, DEPTH],
        )
        return [keys[seq] for (seq,) in cursor.fetchall() if seq in keys]


def _holds(owner_id: str, document: dict[str, Any]) -> bool:
    """Whether the owner holds exactly the document's turns (by seq and content)."""
    from memory.models import Turn

    held = Turn.objects.filter(owner__external_id=owner_id).order_by("seq")
    return list(held.values_list("seq", "content")) == [
        (t["seq"], t["content"]) for t in document["turns"]
    ]


def eval_run(
    *,
    evalset: EvalSet,
    modes: Sequence[str],
    prefix: str,
    keep: bool = False,
    reuse: bool = False,
    baselines: bool = False,
    progress: Callable[[str], None] | None = None,
) -> EvalRun:
    """Load ``evalset`` into owners of ``prefix`` (each forgotten first), search each question in
    ``modes`` (and the baselines), and forget the owners unless ``keep``. With ``reuse``, an owner
    already holding the conversation is searched as it is."""
    from memory import selectors, services
    from memory.selectors.search import queries_forget, semantic_on
    from memory.services.embeddings import turns_embed

    semantic = semantic_on()
    systems = list(modes)
    if baselines:
        systems += list(BASELINES) if semantic else ["bm25"]
    run = EvalRun(evalset, systems)
    by_corpus: dict[str, list[int]] = {}
    for i, question in enumerate(evalset.questions):
        by_corpus.setdefault(question.corpus, []).append(i)
    try:
        for n, (key, asked) in enumerate(by_corpus.items(), 1):
            owner_id = eval_owner_id(prefix=prefix, key=key)
            run.owners[key] = owner_id
            document, keys = _document(run, owner_id, key)
            started = time.perf_counter()
            if not (reuse and _holds(owner_id, document)):
                services.memory_forget(owner_id=owner_id)
                services.memory_import(document=document)
            run.load_seconds += time.perf_counter() - started
            if semantic:
                started = time.perf_counter()
                turns_embed(owner_id=owner_id)
                run.embed_seconds += time.perf_counter() - started
            bm25 = None
            if baselines:
                turns = document["turns"]
                bm25 = Bm25([(keys[t["seq"]], t["content"]) for t in turns])
            for i in asked:
                question = evalset.questions[i]
                q = question.question.strip()[:200] or "?"
                for mode in modes:
                    # NOTE: each mode embeds the question itself, as a first search does.
                    queries_forget()
                    started = time.perf_counter()
                    try:
                        found = selectors.turn_search(
                            owner_id=owner_id, q=q, mode=mode, limit=DEPTH, now=question.asked_at
                        )
                    except ValidationError:
                        # A question the search refuses (no words in it) finds nothing.
                        found = []
                        run.refused += 1
                    except SearchTimeout:
                        # A search past SEARCH_TIMEOUT_MS finds nothing: counted, the run goes on.
                        found = []
                        run.timed_out += 1
                    seconds = time.perf_counter() - started
                    ranking = [keys[t["seq"]] for t in found if t["seq"] in keys]
                    run.ranked.append(Ranked(i, mode, ranking, seconds))
                if bm25 is not None:
                    words = bm25.ranking(q, DEPTH)
                    run.ranked.append(Ranked(i, "bm25", words, None))
                    if semantic:
                        dense = _dense(owner_id, q, keys)
                        run.ranked.append(Ranked(i, "dense", dense, None))
                        fused = rrf([words, dense], DEPTH)
                        run.ranked.append(Ranked(i, "bm25+dense", fused, None))
            if progress:
                progress(
                    f"{n}/{len(by_corpus)} {owner_id}: {len(keys)} turns, {len(asked)} questions"
                )
    finally:
        if not keep:
            for owner_id in run.owners.values():
                services.memory_forget(owner_id=owner_id)
    return run


def _mean(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f}" if values else "-"


def eval_tables(*, run: EvalRun, ks: Sequence[int], ndcg: bool = False) -> str:
    """The run's metrics as Markdown: per system, turn- and session-level recall_any/all@k
    (LongMemEval's), LoCoMo's evidence recall@k where the set is LoCoMo's, then the last k's
    main figure per question type, and each mode's latency."""
    evalset = run.evalset
    corpus = {
        key: [t.key for s in sessions for t in s.turns]
        for key, sessions in evalset.conversations.items()
    }
    session_of = {
        key: {t.key: s.key for s in sessions for t in s.turns}
        for key, sessions in evalset.conversations.items()
    }
    locomo = evalset.format == LOCOMO
    # NOTE: LoCoMo's category 5 asks about what was said of the other speaker (adversarial):
    # shown by category, not in the overall figures, as LoCoMo's own tables do.
    answerable = {
        i
        for i, q in enumerate(evalset.questions)
        if q.turns and not (locomo and q.kind == ADVERSARIAL)
    }
    kinds_of = {i for i, q in enumerate(evalset.questions) if q.turns}
    scores: dict[tuple[str, str, int], list[float]] = {}
    kinds: dict[tuple[str, str], list[float]] = {}
    last = ks[-1]
    for r in run.ranked:
        if r.question not in kinds_of:
            continue
        q = evalset.questions[r.question]
        for k in ks:
            t_any, t_all, t_ndcg = retrieval_scores(
                ranking=r.ranking, correct=q.turns, corpus=corpus[q.corpus], k=k
            )
            s_any, s_all, s_ndcg = session_scores(
                ranking=r.ranking,
                correct=q.sessions,
                corpus=corpus[q.corpus],
                session_of=session_of[q.corpus],
                k=k,
            )
            figures = {
                "turn any": t_any,
                "turn all": t_all,
                "session any": s_any,
                "session all": s_all,
            }
            if ndcg:
                figures |= {"turn ndcg": t_ndcg, "session ndcg": s_ndcg}
            if locomo:
                figures["evidence"] = evidence_recall(ranking=r.ranking, evidence=q.turns, k=k)
            for name, value in figures.items():
                if r.question in answerable:
                    scores.setdefault((r.system, name, k), []).append(value)
            if k == last:
                main = figures["evidence"] if locomo else t_any
                kinds.setdefault((r.system, q.kind), []).append(main)
    names = list(dict.fromkeys(name for _, name, _ in scores))
    columns = [(name, k) for k in ks for name in names]
    lines = [
        f"{len(answerable)} questions with evidence over {len(evalset.conversations)} "
        f"conversations ({len(evalset.questions) - len(kinds_of)} without, "
        f"{evalset.skipped} skipped"
        + (f", {len(kinds_of) - len(answerable)} of category {ADVERSARIAL}" if locomo else "")
        + f"; {run.cut} turns cut to MAX_TURN_CHARS; {run.refused} searches refused; "
        + f"{run.timed_out} timed out)",
        "",
        "| system | " + " | ".join(f"{name}@{k}" for name, k in columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    for system in run.systems:
        cells = [_mean(scores.get((system, name, k), [])) for name, k in columns]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    heading = f"evidence recall@{last}" if locomo else f"turn recall_any@{last}"
    kind_names = sorted({kind for _, kind in kinds})
    lines += [
        "",
        f"{heading} by {'category' if locomo else 'question type'}:",
        "",
        "| kind | n | " + " | ".join(run.systems) + " |",
        "| --- | ---: |" + " ---: |" * len(run.systems),
    ]
    for kind in kind_names:
        n = len(kinds.get((run.systems[0], kind), []))
        kind_cells = [_mean(kinds.get((system, kind), [])) for system in run.systems]
        lines.append(f"| {kind} | {n} | " + " | ".join(kind_cells) + " |")
    timed = [s for s in run.systems if s not in BASELINES]
    if timed:
        lines += ["", "| mode | search p50 ms | search p95 ms |", "| --- | ---: | ---: |"]
        for system in timed:
            seconds = sorted(r.seconds or 0.0 for r in run.ranked if r.system == system)
            if seconds:
                p50 = seconds[len(seconds) // 2] * 1000
                p95 = seconds[min(len(seconds) - 1, int(0.95 * len(seconds)))] * 1000
                lines.append(f"| {system} | {p50:.1f} | {p95:.1f} |")
    return "\n".join(lines)
