"""Retrieval metrics as the public benchmarks compute them, and the baselines' own ranking.

``retrieval_scores`` follows LongMemEval's ``src/retrieval/eval_utils.py`` (``recall_any@k``,
``recall_all@k``, ``ndcg@k``, at turn and session level); ``evidence_recall`` is LoCoMo's. ``Bm25``
is Okapi BM25 (k1 1.2, b 0.75) over lower-cased words and CJK characters and pairs: the word
baseline the search is measured against.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_STOP = frozenset(
    " ".join(
        (
            "a an and are as at be but by did do does for from had has have how i in is it its",
            "me my of on or our so than that the their them then there these they this to was",
            "we were what when where which who whom why will with would you your",
        )
    ).split(" ")
)


def _dcg(relevances: Sequence[float], k: int) -> float:
    head = list(relevances[:k])
    if not head:
        return 0.0
    return head[0] + sum(rel / math.log2(i) for i, rel in enumerate(head[1:], 2))


def _ndcg(ranking: Sequence[str], correct: set[str], corpus: Sequence[str], k: int) -> float:
    ideal = _dcg(sorted((1.0 if doc in correct else 0.0 for doc in corpus), reverse=True), k)
    if ideal == 0:
        return 0.0
    return _dcg([1.0 if doc in correct else 0.0 for doc in ranking[:k]], k) / ideal


def retrieval_scores(
    *, ranking: Sequence[str], correct: Iterable[str], corpus: Sequence[str], k: int
) -> tuple[float, float, float]:
    """``(recall_any, recall_all, ndcg)`` at ``k`` of ``ranking`` (ids of ``corpus``, best
    first) for the ``correct`` ids."""
    correct = set(correct)
    top = set(ranking[:k])
    return (
        float(any(doc in top for doc in correct)),
        float(all(doc in top for doc in correct)),
        _ndcg(ranking, correct, corpus, k),
    )


def session_scores(
    *,
    ranking: Sequence[str],
    correct: Iterable[str],
    corpus: Sequence[str],
    session_of: dict[str, str],
    k: int,
) -> tuple[float, float, float]:
    """``retrieval_scores`` at session level: each turn id as its session's, ``correct`` the
    evidence sessions, and k grown until the top holds k distinct sessions (or all of them)."""
    sessions = [session_of[doc] for doc in ranking]
    effective = k
    while effective < len(sessions) and len(set(sessions[:effective])) < k:
        effective += 1
    corpus_sessions = [session_of[doc] for doc in corpus]
    return retrieval_scores(ranking=sessions, correct=correct, corpus=corpus_sessions, k=effective)


def evidence_recall(*, ranking: Sequence[str], evidence: Iterable[str], k: int) -> float:
    """LoCoMo's: the share of the ``evidence`` ids among the top ``k`` of ``ranking``."""
    evidence = set(evidence)
    if not evidence:
        return 0.0
    return len(evidence & set(ranking[:k])) / len(evidence)


def tokens(text: str) -> list[str]:
    """BM25's terms of ``text``: lower-cased words but common English ones; in CJK text each
    character and each pair of neighbouring characters."""
    found = []
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):
            chars = [c for c in word if _CJK.match(c)]
            found.extend(chars)
            found.extend(a + b for a, b in itertools.pairwise(chars))
            rest = _CJK.sub(" ", word).split()
            found.extend(w for w in rest if w not in _STOP)
        elif word not in _STOP:
            found.append(word)
    return found


class Bm25:
    """Okapi BM25 over ``documents`` (their ids and texts)."""

    def __init__(self, documents: Sequence[tuple[str, str]], k1: float = 1.2, b: float = 0.75):
        self.ids = [doc_id for doc_id, _ in documents]
        self.terms = [Counter(tokens(text)) for _, text in documents]
        self.lengths = [sum(t.values()) for t in self.terms]
        self.average = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        df: Counter[str] = Counter()
        for t in self.terms:
            df.update(t.keys())
        n = len(documents)
        self.idf = {term: math.log(1 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}
        self.k1, self.b = k1, b

    def ranking(self, query: str, limit: int) -> list[str]:
        """The ids of the ``limit`` best documents for ``query`` (those sharing a term)."""
        wanted = set(tokens(query)) & self.idf.keys()
        scored = []
        for i, terms in enumerate(self.terms):
            score = 0.0
            norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / (self.average or 1))
            for term in wanted:
                f = terms.get(term)
                if f:
                    score += self.idf[term] * f * (self.k1 + 1) / (f + norm)
            if score > 0:
                scored.append((-score, i))
        scored.sort()
        return [self.ids[i] for _, i in scored[:limit]]


def rrf(rankings: Sequence[Sequence[str]], limit: int, k: int = 60) -> list[str]:
    """Reciprocal rank fusion of ``rankings``: each id's sum of 1 / (k + rank)."""
    score: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, 1):
            score[doc] = score.get(doc, 0.0) + 1.0 / (k + rank)
    return [doc for doc, _ in sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]
