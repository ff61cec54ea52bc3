"""The quality benchmark: recall of what a user was told, in the shape of LongMemEval, on a set
the team wrote (``bench/quality_set.json``), English and Chinese.

Each item is a question with its date over an owner of its own: 30-38 dated sessions of 4-12
turns over the 240 days before the question, generated here from the set's filler
(deterministic: the item's id seeds it), with the item's blocks said in sessions of their own
dates. A block is evidence (``ev``: what must be found), a statement a newer one replaced
(``old``, of the ``changed`` items) or a near miss (``decoy``). The categories:

- ``user``, ``assistant``: a detail the user, or the assistant, said once;
- ``preference``: a preference stated in passing, asked about as a request for a suggestion;
- ``multi``: evidence in 2-3 sessions, all of which must be found (recall_all);
- ``changed``: a fact that changed: the newest statement must be found, and ranked above the
  one it replaced (``newest above old``);
- ``temporal``: a question that names a time or an order ("in April", "which came first"),
  among near misses of the same kind at other dates (``right date above the near misses``);
- ``absent``: the answer was never said (near misses are): for the abstention AUC, how well
  the top result's score tells answerable questions from these.

An item counts as recalled at k when every evidence block has an evidence turn among the top k
results. The owners are loaded through the services (``memory_import``: the turns keep their
dates), embedded synchronously (``turns_embed``), and searched with ``selectors.turn_search``
in each mode (``now`` the question's date, where the search takes one).

``make bench-quality`` (``python -m bench.quality``) prints the table; ``python -m bench
--only quality`` gives its summary rows. Filler repeats across items, as LongMemEval's
haystacks share their sessions, so the bench keeps the embedder's vectors by text
(``.tmp/quality-vectors-<hash of its name>.json``): the embedder's own vectors, computed once.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import inspect
import json
import math
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QUALITY_SET = Path(__file__).resolve().parent / "quality_set.json"
VECTOR_CACHE = ROOT / ".tmp"
EMBEDDER = "memory.recall.embedders.multilingual_e5"
CATEGORIES = ("user", "assistant", "preference", "multi", "changed", "temporal", "absent")
ANSWERABLE = CATEGORIES[:-1]
MODES = ("text", "semantic", "hybrid")
LANGS = ("en", "zh")
SPAN_DAYS = 240
SESSIONS = (30, 38)
PAIRS = (2, 6)
POOL_SESSIONS = 160
TOP = 10
OWNER_PREFIX = "quality-"

# What the filler's turns may begin or end with, so that a line said in many sessions is not
# the same string each time (its meaning is).
_OPENERS = {
    "en": ("", "", "Quick question: ", "Another thing: ", "Hi again! ", "Sorry, one more: "),
    "zh": ("", "", "问一下，", "还有个问题：", "你好，", "再请教一下，"),
}
_CLOSERS = {
    "en": ("", "", " Hope that helps!", " Want more detail on any of it?", " Good luck!"),
    "zh": ("", "", "希望对你有帮助！", "需要的话我可以再详细说说。", "祝顺利！"),
}
_ACKS = {
    "en": (
        "Thanks for telling me. Here are a few ideas to start with.",
        "Good to know! Let me suggest a couple of options.",
        "That makes sense. Here's what I would try first.",
        "Got it. A few practical tips below.",
    ),
    "zh": (
        "谢谢告诉我，先给你几个建议。",
        "了解了！我推荐几个办法。",
        "明白，我先说说可以怎么做。",
        "好的，下面是几条实用的建议。",
    ),
}


# The set measured: ``QUALITY_SET``, or another of its shape (``--set``: the held-out set,
# ``bench/holdout_set.json``, on which no weight was fitted).
_set_file = QUALITY_SET


def quality_set() -> dict[str, Any]:
    return json.loads(_set_file.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def quality_items(*, langs: Iterable[str] = LANGS) -> list[dict[str, Any]]:
    wanted = set(langs)
    return [item for item in quality_set()["items"] if item["lang"] in wanted]


def filler_pool(lang: str) -> list[list[tuple[str, str]]]:
    """``POOL_SESSIONS`` filler sessions of the language (the same on every call): each a topic's
    2-6 questions and their answers, user and assistant in turn."""
    topics = quality_set()["filler"][lang]
    rnd = random.Random(f"pool-{lang}")
    pool = []
    names = sorted(topics)
    for _ in range(POOL_SESSIONS):
        topic = topics[rnd.choice(names)]
        pairs = rnd.sample(range(len(topic["user"])), rnd.randint(*PAIRS))
        turns = []
        for i in pairs:
            turns.append(("user", rnd.choice(_OPENERS[lang]) + topic["user"][i]))
            turns.append(("assistant", topic["assistant"][i] + rnd.choice(_CLOSERS[lang])))
        pool.append(turns)
    return pool


@dataclass
class Haystack:
    """An item's owner as loaded: its export document, and the seqs of its blocks' starred
    turns (one set per block)."""

    item: dict[str, Any]
    owner_id: str
    document: dict[str, Any]
    evidence: list[set[int]]
    old: list[set[int]]
    asked_at: dt.datetime
    decoys: list[set[int]] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return len(self.document["turns"])


def _block_turns(
    lang: str, block: list[str], rnd: random.Random, *, whole: bool = False
) -> list[tuple[str, str, bool]]:
    """The block's turns (role, text, marked): its starred ones marked, or all of its own where
    ``whole`` (a near miss is all it says); a user turn last gets a filler reply."""
    turns = []
    for line in block:
        starred = whole or line.startswith("*")
        role, _, text = line.lstrip("*").partition(": ")
        turns.append(({"U": "user", "A": "assistant"}[role], text, starred))
    if turns[-1][0] == "user":
        turns.append(("assistant", rnd.choice(_ACKS[lang]), False))
    return turns


def haystack_build(item: dict[str, Any], *, prefix: str = OWNER_PREFIX) -> Haystack:
    """The item's owner: 30-38 sessions over the ``SPAN_DAYS`` before its question, filler from
    ``filler_pool`` with each block in a session of its own, on the block's day."""
    lang = item["lang"]
    rnd = random.Random(item["id"])
    pool = filler_pool(lang)
    asked_at = dt.datetime.fromisoformat(item["date"]).replace(hour=12, tzinfo=dt.UTC)
    blocks = [
        (kind, ago, lines) for kind in ("ev", "old", "decoy") for ago, lines in item.get(kind, [])
    ]
    count = rnd.randint(*SESSIONS)
    agos = rnd.sample(range(1, SPAN_DAYS + 1), count)
    placed: dict[int, tuple[str, list[str]]] = {}
    for kind, ago, lines in blocks:
        free = [i for i in range(count) if i not in placed]
        nearest = min(free, key=lambda i: abs(agos[i] - ago))
        agos[nearest] = ago
        placed[nearest] = (kind, lines)
    order = sorted(range(count), key=lambda i: -agos[i])
    turns: list[dict[str, Any]] = []
    sessions = []
    found: dict[int, tuple[str, set[int]]] = {}
    for number, i in enumerate(order, 1):
        session_id = f"s{number:02d}"
        filler = [(role, text, False) for role, text in rnd.choice(pool)]
        if i in placed:
            kind, lines = placed[i]
            block = _block_turns(lang, lines, rnd, whole=kind == "decoy")
            keep = max(0, min(len(filler), 12 - len(block)) // 2 * 2)
            filler = filler[:keep]
            at = rnd.randrange(0, len(filler) + 1, 2)
            session = filler[:at] + block + filler[at:]
        else:
            session = filler
        day = asked_at - dt.timedelta(days=agos[i])
        start = day.replace(hour=8) + dt.timedelta(minutes=rnd.randrange(0, 12 * 60))
        seqs = set()
        for n, (role, text, starred) in enumerate(session):
            seq = len(turns) + 1
            at_time = (start + dt.timedelta(minutes=2 * n)).isoformat()
            turns.append(
                {
                    "seq": seq,
                    "session_id": session_id,
                    "role": role,
                    "content": text,
                    "metadata": {},
                    "created_at": at_time,
                }
            )
            if starred:
                seqs.add(seq)
        if i in placed:
            found[i] = (placed[i][0], seqs)
        sessions.append(
            {
                "session_id": session_id,
                "first_seen": start.isoformat(),
                "last_seen": turns[-1]["created_at"],
                "turn_count": len(session),
            }
        )
    evidence = [seqs for kind, seqs in found.values() if kind == "ev" and seqs]
    old = [seqs for kind, seqs in found.values() if kind == "old" and seqs]
    decoys = [seqs for kind, seqs in found.values() if kind == "decoy" and seqs]
    owner_id = prefix + item["id"]
    from memory.selectors.export import EXPORT_FORMAT, EXPORT_VERSION

    document = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "user_id": owner_id,
        "exported_at": asked_at.isoformat(),
        "facts": [],
        "fact_history": [],
        "turns": turns,
        "sessions": sessions,
        "summary": None,
    }
    return Haystack(item, owner_id, document, evidence, old, asked_at, decoys)


# --- the embedder, by text ----------------------------------------------------------------------


class CachedEmbedder:
    """An embedder (``EMBEDDER``'s) whose vectors are kept by text, in memory and in
    ``.tmp/quality-vectors-<hash of its name>.json``: the same vectors, each text embedded once."""

    def __init__(self, path: str) -> None:
        from django.utils.module_loading import import_string

        self.inner = import_string(path)
        if isinstance(self.inner, type):
            self.inner = self.inner()
        self.name = getattr(self.inner, "name", path)
        self._lock = threading.Lock()
        self.passages: dict[str, list[float]] = {}
        self.queries: dict[str, list[float]] = {}
        slug = hashlib.sha1(self.name.encode()).hexdigest()[:10]
        self.file = VECTOR_CACHE / f"quality-vectors-{slug}.json"
        if self.file.exists():
            kept = json.loads(self.file.read_text(encoding="utf-8"))
            if kept.get("name") == self.name:
                self.passages, self.queries = kept["passages"], kept["queries"]
        self.embedded = 0

    def _cached(
        self, kept: dict[str, list[float]], embed: Callable[..., Any], texts: Sequence[str]
    ) -> list[list[float]]:
        with self._lock:
            missing = sorted({text for text in texts if text not in kept})
        if missing:
            for start in range(0, len(missing), 64):
                chunk = missing[start : start + 64]
                vectors = embed(chunk)
                with self._lock:
                    for text, vector in zip(chunk, vectors, strict=True):
                        kept[text] = [float(x) for x in vector]
                self.embedded += len(chunk)
        return [kept[text] for text in texts]

    def __call__(self, texts: Sequence[str], /) -> list[list[float]]:
        return self._cached(self.passages, self.inner, texts)

    def query(self, texts: Sequence[str], /) -> list[list[float]]:
        embed = getattr(self.inner, "query", self.inner)
        # NOTE: not kept: a query's embedding is part of what a search costs.
        return [list(map(float, vector)) for vector in embed(list(texts))]

    def save(self) -> None:
        VECTOR_CACHE.mkdir(exist_ok=True)
        payload = {"name": self.name, "passages": self.passages, "queries": {}}
        self.file.write_text(json.dumps(payload), encoding="utf-8")


_cached: CachedEmbedder | None = None


def cached_embedder(texts: Sequence[str], /) -> list[list[float]]:
    """``MEMORY["EMBEDDER"]`` during the bench: the ``CachedEmbedder`` it set up."""
    assert _cached is not None
    return _cached(texts)


def _cached_query(texts: Sequence[str], /) -> list[list[float]]:
    assert _cached is not None
    return _cached.query(texts)


cached_embedder.query = _cached_query  # type: ignore[attr-defined]


# --- measuring --------------------------------------------------------------------------------


@dataclass
class Result:
    """One item searched in one mode."""

    item: dict[str, Any]
    mode: str
    seqs: list[int]
    top_score: float | None
    seconds: float
    evidence: list[set[int]]
    old: list[set[int]]
    decoys: list[set[int]] = field(default_factory=list)

    def rank(self, seqs: set[int]) -> int | None:
        """The 1-based rank of the best of ``seqs`` among the results, else ``None``."""
        for i, seq in enumerate(self.seqs, 1):
            if seq in seqs:
                return i
        return None

    def recalled(self, k: int) -> bool:
        """Every evidence block has a turn among the top ``k``."""
        ranks = [self.rank(block) for block in self.evidence]
        return bool(ranks) and all(r is not None and r <= k for r in ranks)

    def newest_first(self) -> bool:
        """The newest statement is among the results and above every one it replaced."""
        return self._above(self.old)

    def right_time_first(self) -> bool:
        """The evidence is among the results and above every near miss of another time."""
        return self._above(self.decoys)

    def _above(self, others: list[set[int]]) -> bool:
        best = self.rank(set().union(*self.evidence))
        if best is None:
            return False
        return all(r is None or best < r for r in (self.rank(block) for block in others))


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)
    load_seconds: float = 0.0
    embed_seconds: float = 0.0
    embedded: int = 0
    turns: int = 0

    def of(self, mode: str, lang: str | None = None, cat: str | None = None) -> list[Result]:
        return [
            r
            for r in self.results
            if r.mode == mode
            and (lang is None or r.item["lang"] == lang)
            and (cat is None or r.item["cat"] == cat)
        ]

    def recall(
        self, mode: str, k: int, lang: str | None = None, cat: str | None = None
    ) -> float | None:
        if cat is None:
            chosen = [r for r in self.of(mode, lang) if r.item["cat"] in ANSWERABLE]
        else:
            chosen = self.of(mode, lang, cat)
        if not chosen:
            return None
        return sum(r.recalled(k) for r in chosen) / len(chosen)

    def newest_first(self, mode: str, lang: str | None = None) -> float | None:
        chosen = self.of(mode, lang, "changed")
        return sum(r.newest_first() for r in chosen) / len(chosen) if chosen else None

    def right_time_first(self, mode: str, lang: str | None = None) -> float | None:
        chosen = [r for r in self.of(mode, lang, "temporal") if r.decoys]
        return sum(r.right_time_first() for r in chosen) / len(chosen) if chosen else None

    def auc(self, mode: str, lang: str | None = None) -> float | None:
        """How often an answerable question's top score is above an unanswerable one's (ties
        half): the area under the ROC curve of the top score as an "answer exists" detector.
        ``None`` where the mode gives no scores."""
        chosen = self.of(mode, lang)
        if any(r.top_score is None and r.seqs for r in chosen):
            return None
        score = [r.top_score if r.top_score is not None else float("-inf") for r in chosen]
        pos = [s for s, r in zip(score, chosen, strict=True) if r.item["cat"] != "absent"]
        neg = [s for s, r in zip(score, chosen, strict=True) if r.item["cat"] == "absent"]
        if not pos or not neg:
            return None
        wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
        return wins / (len(pos) * len(neg))

    def latency(self, mode: str) -> tuple[float, float]:
        seconds = sorted(r.seconds for r in self.of(mode))
        return _quantile(seconds, 0.5), _quantile(seconds, 0.95)


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    return values[min(len(values) - 1, int(q * len(values)))]


def _search_kwargs(item: dict[str, Any], asked_at: dt.datetime) -> dict[str, Any]:
    """What ``turn_search`` is told beyond the query: the question's date, where it takes one."""
    from memory import selectors

    if "now" in inspect.signature(selectors.turn_search).parameters:
        return {"now": asked_at}
    return {}


def quality_run(
    *,
    langs: Sequence[str] = LANGS,
    modes: Sequence[str] = MODES,
    embedder: str = EMBEDDER,
    prefix: str = OWNER_PREFIX,
    keep: bool = False,
    only: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Load each item of ``langs`` into an owner of ``prefix`` (forgotten first), embed it, and
    search it in each of ``modes``; the owners are forgotten afterwards unless ``keep``.
    Needs Django set up on a database with pgvector (the bench's)."""
    global _cached
    from django.conf import settings
    from django.test import override_settings

    from memory import ops, selectors, services
    from memory.selectors import search as search_selectors

    _cached = CachedEmbedder(embedder)
    report = Report()
    items = [
        i for i in quality_items(langs=langs) if not only or i["id"] in only or i["cat"] in only
    ]
    memory_settings = {**settings.MEMORY, "EMBEDDER": "bench.quality.cached_embedder"}
    with override_settings(MEMORY=memory_settings):
        stacks = []
        for item in items:
            stack = haystack_build(item, prefix=prefix)
            started = time.perf_counter()
            services.memory_forget(owner_id=stack.owner_id)
            services.memory_import(document=stack.document)
            report.load_seconds += time.perf_counter() - started
            started = time.perf_counter()
            ops.turns_embed(owner_id=stack.owner_id)
            report.embed_seconds += time.perf_counter() - started
            report.turns += stack.turns
            stacks.append(stack)
        report.embedded = _cached.embedded
        _cached.save()
        if progress:
            progress(
                f"loaded {len(stacks)} owners, {report.turns} turns in "
                f"{report.load_seconds:.1f} s; embedding {report.embed_seconds:.1f} s "
                f"({report.embedded} new texts)"
            )
        # NOTE: each search embeds its question, as a first search does: no vector of the mode
        # before is reused (the search keeps an owner's recent queries').
        forget = getattr(search_selectors, "queries_forget", lambda: None)
        for mode in modes:
            for stack in stacks:
                extra = _search_kwargs(stack.item, stack.asked_at)
                forget()
                started = time.perf_counter()
                found = selectors.turn_search(
                    owner_id=stack.owner_id, q=stack.item["q"], mode=mode, limit=TOP, **extra
                )
                seconds = time.perf_counter() - started
                top = found[0].get("score") if found else None
                if not found:
                    top = float("-inf")
                report.results.append(
                    Result(
                        stack.item,
                        mode,
                        [turn["seq"] for turn in found],
                        top,
                        seconds,
                        stack.evidence,
                        stack.old,
                        stack.decoys,
                    )
                )
        if not keep:
            for stack in stacks:
                services.memory_forget(owner_id=stack.owner_id)
    return report


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def quality_table(
    report: Report, *, modes: Sequence[str] = MODES, langs: Sequence[str] = LANGS
) -> str:
    """The report as Markdown: recall@5/@10 by category and language for each mode, the
    changed facts' newest-above-old rate, the abstention AUC and each mode's latency."""
    names = quality_set()["categories"]
    head = "| category | lang | n | " + " | ".join(f"{m} R@5 | {m} R@10" for m in modes) + " |"
    lines = [head, "| --- | --- | ---: |" + " ---: | ---: |" * len(modes)]

    def line(title: str, lang: str | None, cat: str | None) -> None:
        chosen = report.of(modes[0], lang, cat)
        if cat is None:
            chosen = [r for r in chosen if r.item["cat"] in ANSWERABLE]
        if not chosen:
            return
        cells = []
        for mode in modes:
            cells += [
                _cell(report.recall(mode, 5, lang, cat)),
                _cell(report.recall(mode, 10, lang, cat)),
            ]
        lines.append(f"| {title} | {lang or 'all'} | {len(chosen)} | " + " | ".join(cells) + " |")

    for cat in ANSWERABLE:
        for lang in langs:
            line(names[cat], lang, cat)
    for lang in langs:
        line("**all answerable**", lang, None)
    if len(langs) > 1:
        line("**all answerable**", None, None)
    lines.append("")
    lines.append("| measure | lang | " + " | ".join(modes) + " |")
    lines.append("| --- | --- |" + " ---: |" * len(modes))
    for lang in (*langs, None):
        if lang is None and len(langs) == 1:
            continue
        lines.append(
            f"| changed: newest above old | {lang or 'all'} | "
            + " | ".join(_cell(report.newest_first(m, lang)) for m in modes)
            + " |"
        )
    for lang in (*langs, None):
        if lang is None and len(langs) == 1:
            continue
        lines.append(
            f"| time: right date above the near misses | {lang or 'all'} | "
            + " | ".join(_cell(report.right_time_first(m, lang)) for m in modes)
            + " |"
        )
    for lang in (*langs, None):
        if lang is None and len(langs) == 1:
            continue
        lines.append(
            f"| abstention AUC (top score) | {lang or 'all'} | "
            + " | ".join(_cell(report.auc(m, lang)) for m in modes)
            + " |"
        )
    for q, name in ((0, "p50"), (1, "p95")):
        lines.append(
            f"| search latency {name} (ms) | all | "
            + " | ".join(f"{report.latency(m)[q] * 1000:.1f}" for m in modes)
            + " |"
        )
    return "\n".join(lines)


def quality_summary(report: Report) -> list[dict[str, Any]]:
    """The figures ``python -m bench`` shows as rows, one per mode: recall@5 over all
    answerable items, with the rest in its note."""
    rows = []
    for mode in MODES:
        if not report.of(mode):
            continue
        p50, p95 = report.latency(mode)
        rows.append(
            {
                "mode": mode,
                "recall5": report.recall(mode, 5),
                "recall10": report.recall(mode, 10),
                "by_lang": {lang: report.recall(mode, 5, lang) for lang in LANGS},
                "by_category": {cat: report.recall(mode, 5, None, cat) for cat in ANSWERABLE},
                "newest_first": report.newest_first(mode),
                "right_time_first": report.right_time_first(mode),
                "auc": report.auc(mode),
                "p50": p50,
                "p95": p95,
                "questions": len(report.of(mode)),
            }
        )
    return rows


def quality_note(figures: dict[str, Any]) -> str:
    """One mode's figures of ``quality_summary`` in a line."""

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    by_lang = ", ".join(f"{k} {share(v)}" for k, v in figures["by_lang"].items())
    by_cat = ", ".join(f"{k} {share(v)}" for k, v in figures["by_category"].items())
    return (
        f"{figures['mode']}: R@5 {share(figures['recall5'])} (R@10 {share(figures['recall10'])};"
        f" {by_lang}; {by_cat}); newest above old {share(figures['newest_first'])}; right date"
        f" first {share(figures['right_time_first'])}; abstention AUC {share(figures['auc'])};"
        f" p50 {figures['p50'] * 1000:.1f} ms, p95 {figures['p95'] * 1000:.1f} ms"
    )


def embedder_table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """One row per embedder and mode of ``quality_summary``'s figures, as Markdown."""

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines = [
        "| embedder | mode | R@5 | R@10 | en R@5 | zh R@5 | newest above old | AUC | p95 (ms) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for path, f in rows:
        lines.append(
            f"| {path} | {f['mode']} | {share(f['recall5'])} | {share(f['recall10'])} | "
            f"{share(f['by_lang'].get('en'))} | {share(f['by_lang'].get('zh'))} | "
            f"{share(f['newest_first'])} | {share(f['auc'])} | {f['p95'] * 1000:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.quality", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--lang", choices=LANGS, action="append", help="one language (repeatable)")
    parser.add_argument("--mode", choices=MODES, action="append", help="one mode (repeatable)")
    parser.add_argument("--only", default="", help="comma-separated item ids or categories")
    parser.add_argument(
        "--embedder",
        action="append",
        help="dotted path of the embedder (repeatable: a summary row each, the last one's table)",
    )
    parser.add_argument(
        "--set",
        type=Path,
        default=QUALITY_SET,
        help="the set of questions (default bench/quality_set.json; bench/holdout_set.json is"
        " the held-out one)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the owners (quality-*)")
    parser.add_argument("--json", type=Path, help="also write the per-item results here")
    parser.add_argument("--misses", action="store_true", help="list the items hybrid misses at 5")
    args = parser.parse_args(argv)
    global _set_file
    _set_file = args.set
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    from bench import settings as bench_settings
    from bench.seed import database_create

    database_create(bench_settings.DATABASE_URL)
    import django

    django.setup()
    from django.core.management import call_command

    from memory.services.embeddings import vectors_create

    call_command("migrate", verbosity=0, interactive=False)
    # NOTE: a bench database migrated before pgvector was installed has no vector tables.
    vectors_create("default")
    langs = tuple(args.lang or LANGS)
    modes = tuple(args.mode or MODES)
    paths = args.embedder or [EMBEDDER]
    rows = []
    for path in paths:
        report = quality_run(
            langs=langs,
            modes=modes,
            embedder=path,
            keep=args.keep,
            only=[x for x in args.only.split(",") if x],
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
        rows += [(path, figures) for figures in quality_summary(report)]
    if len(paths) > 1:
        print(embedder_table(rows) + "\n")
    print(quality_table(report, modes=modes, langs=langs))
    if args.misses:
        mode = "hybrid" if "hybrid" in modes else modes[-1]
        print(f"\nmissed by {mode} at 5:")
        for r in report.of(mode):
            if r.item["cat"] != "absent" and not r.recalled(5):
                wanted = sorted(set().union(*r.evidence))
                print(f"  {r.item['id']}: {r.item['q']} (evidence {wanted}, got {r.seqs[:5]})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        rows = [
            {
                "id": r.item["id"],
                "mode": r.mode,
                "seqs": r.seqs,
                "evidence": [sorted(b) for b in r.evidence],
                "old": [sorted(b) for b in r.old],
                "top_score": r.top_score if r.top_score != float("-inf") else None,
                "ms": round(r.seconds * 1000, 2),
            }
            for r in report.results
        ]
        args.json.write_text(
            json.dumps({"summary": quality_summary(report), "results": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    # NOTE: run as bench.quality, the module MEMORY["EMBEDDER"] names, not as __main__ (a
    # second copy whose embedder would never be set up).
    from bench.quality import main as quality_main

    raise SystemExit(quality_main())
