"""Fusing what a search found into one ranking: each turn's calibrated score
(``candidate_logit``) and the order results are chosen in (``ranked``). Pure Python over the
candidates' features, no I/O."""

from __future__ import annotations

import heapq
import math
import unicodedata
from typing import Any

from memory.asked import (
    ACCOUNT_KINDS,
    asks_present,
    repeat_terms,
    role_asked,
    says_change,
    says_of_self,
    slot_asked,
    slot_held,
    stated,
    subject_terms,
    thing_asked,
    thing_held,
)
from memory.search import CJK_RUN_RE

# NOTE: the ranking's calibration: a logistic model of "this turn holds evidence for the
# question", fitted on the candidates of the team's quality set (docs/recall.md, "The score"):
# per mode, the bias and the weights of the cosine similarity to the query (centred on the
# owner's mean, ``vectors.Centred``; ``<mode> plain``: an owner compared uncentred), of the
# candidate's crowding (the mean cosine of its ``CROWD_NEIGHBOURS`` nearest fellow candidates,
# measured alike), of a question with Chinese, Japanese or Korean text (whose cosines run
# higher), of the share of the query's BM25 weight the turn matches, of the turn being said by
# the side the question asks about (``role_asked``), and of a user's turn that says something
# changed (``says_change``).
CALIBRATION: dict[str, tuple[float, ...]] = {
    #          bias   cosine  crowding  cjk    coverage  role  change
    "hybrid": (-6.51, 17.98, -9.78, -0.2, 4.0, 2.4, 2.0),
    "semantic": (-6.51, 18.83, -10.0, -0.37, 0.0, 2.4, 2.0),
    "hybrid plain": (-37.37, 60.36, -21.38, -0.94, 4.0, 2.4, 2.0),
    "semantic plain": (-37.69, 61.05, -21.62, -1.01, 0.0, 2.4, 2.0),
    "text": (-5.63, 0.0, 0.0, 0.0, 9.65, 1.0, 1.0),
}
# NOTE: the ``score`` a result of a centred search shows: the same model on the plain cosine
# instead (no crowding), which tells a question about something never said apart better than
# the centred one, which ranks better. Its bias and the weights of the plain cosine, of CJK
# text, of coverage, of the side asked, of a change, and of the search's ``density`` over
# ``DENSITY_USUAL``. The cosine's and the coverage's were chosen on abstention: a near miss
# says the question's subject in its words, an answer says the value in its own, so sharing
# the question's words counts against a result's score (not its rank), and the cosine weighs
# half its fitted weight (docs/recall.md, "The score").
SCORE: dict[str, tuple[float, ...]] = {
    #          bias   cosine  cjk    coverage  role  change  density
    "hybrid": (-25.4, 25.0, -3.14, -2.0, 2.4, 2.0, 50.0),
    "semantic": (-25.07, 24.83, -3.22, 0.0, 2.4, 2.0, 50.0),
}
# NOTE: a search's density: the mean plain cosine of the ``DENSITY_TURNS`` candidates nearest
# to the query. A history that talked about the question's subject has several turns near it;
# one that never did has a near miss or two among unrelated turns. It is the same for every
# result of a search (the order is unchanged) and moves the score of all of them: a query
# performance predictor (the mean of the top-k retrieval scores), fitted on the abstention of
# the team's quality set and checked on a held-out set (docs/recall.md, "The score").
DENSITY_TURNS = 10
# The density of a usual search (the mean over the quality set's questions).
DENSITY_USUAL = 0.85
# Fellow candidates whose mean cosine to a turn is its crowding: a turn like many others (a
# question asked again and again, a stock reply) is like the query for no reason of its own
# (hubness; the correction is CSLS's, Conneau et al. 2018).
CROWD_NEIGHBOURS = 10
# Added to a candidate's logit in proportion to how late it was said among the candidates
# (0 the oldest, 1 the newest): of two turns that answer alike, the newer ranks first.
RECENCY_WEIGHT = 0.1
# Taken off a candidate's logit for each better turn of its session already chosen, so that
# evidence spread over sessions is found together (the ``score`` shown is without it).
SESSION_PENALTY = 0.1
# Taken off a candidate's logit when a turn already chosen says nearly the same (at least
# ``REPEAT_SHARE`` of the shorter one's terms in common): the same question asked in five
# sessions takes one place of the results, not five.
REPEAT_PENALTY = 2.0
REPEAT_SHARE = 0.6
# NOTE: added to the ranking's logit (not the score's) of a user's turn that tells something
# (``says_of_self``) in a question about the user: what a user said of themselves answers such
# a question more often than a question they asked about the world.
SELF_WEIGHT = 1.0
# The results are chosen from the best this many times their number (at least 30).
POOL_PER_RESULT = 3
# A candidate gains this share of what its best neighbour in the session (the turn just before
# or after) scores above it: the reply to a question that matches, the question of a reply.
NEIGHBOUR_SHARE = 0.5
# A match of the typo fallback counts as this share of the query's words.
SIMILAR_COVERAGE = 0.5
# NOTE: supersession, in a question about the user's present: a user's turn among the best
# ``SUPERSEDE_POOL`` candidates, said in a later session than a result of the user, ranks
# directly above that result when it says something changed (``says_change``) about the same
# subject (a cosine similarity of at least ``ALIKE`` between the two turns, measured as the
# search measured: ``ranking.turns_features``), or when the question asks for a value
# (``slot_asked``), both state one of its kind (``slot_held`` over ``stated``) and the later is
# at most ``NEWER_MARGIN`` logits less likely evidence: a later answer to the same question
# ("First week at Deloitte done" after "six years at Harlow & Sons" for "where do I work
# now?"). What was true is replaced by what is. A rule, not a weight.
ALIKE = 0.2
SUPERSEDE_POOL = 10
NEWER_MARGIN = 3.0
# NOTE: and without a word of a change or a value asked, a later user's turn alike to a result
# replaces it when it is at most this many logits less likely evidence: "the vet put him on
# Acana" after "he has always eaten Royal Canin", for "what does my dog eat now?".
SAME_SUBJECT_MARGIN = 3.0
# NOTE: and a later user's turn that says a change (``says_change``) replaces a result it is at
# most this many logits less likely evidence than, alike or not: "搬到了<a new place>" after "<the
# old place> is cold in winter", for "which compound do we live in now?".
CHANGE_MARGIN = 1.0
# NOTE: in a question asking for a value (a number, a name, a colour, a date, a place, a named
# place of business, a reason, a feeling: ``slot_asked``), a result that holds none of that
# kind (``slot_held``; for a question about the other side, nor the reply beside it) is
# likely not its answer: a near miss on its subject ("my son needs new football boots" for
# "what shoe size does my son wear?"). Its score loses ``SLOT_PENALTY`` logits; the order is
# unchanged. Chosen on the abstention of the team's quality set (docs/recall.md, "The score").
SLOT_PENALTY = 6.0
# NOTE: a result that holds no value asked (or where the question asks for none a rule can
# check: a breed, a dish, a medicine) and repeats more than ``ECHO_FREE`` of the question's
# subject terms (``subject_terms``) loses ``ECHO_WEIGHT`` logits of its score per unit of share
# beyond: a near miss names the subject in the question's own words ("my neighbour's cat keeps
# sleeping on our car" for "what breed is my neighbour's cat?"), an answer names the value in
# its own ("a little beagle"). The order is unchanged (docs/recall.md, "The score").
ECHO_WEIGHT = 10.0
ECHO_FREE = 0.2
# NOTE: a Chinese question asking for a thing and no kind a rule reads (``thing_asked``: "开了什么
# 药", "哪种花") is answered by a result that introduces one (``thing_held``: "开了阿莫西林",
# "一只萨摩耶"); one that does not (a near miss naming the subject again) loses ``THING_PENALTY``
# logits of its score (chosen of 3, 4.5 and 6 on the Chinese abstention of six sets). The order
# is unchanged (docs/recall.md, "The score").
THING_PENALTY = 4.5

# What the ranking's text rules read of a turn: its opening. A search's CPU (and the time its
# thread holds the interpreter from the rest of the process) stays bounded by the candidates'
# count, not their size: 100 turns of 32 KB read whole took 0.2 s a search.
RANK_CHARS = 4000


class Candidate:
    """A turn a search found, with what ranks it: its row (``TURN_FIELDS``: ``seq``,
    ``session_id``, ``role``, ``content`` first), its cosine to the query and crowding (``None``
    without a vector), and the share of the query's words it holds; ``plain``, its plain cosine
    where ``cosine`` is centred (``SCORE``); ``alike``, the pks of the fellow candidates about
    the same subject (``ALIKE``)."""

    __slots__ = (
        "_change",
        "alike",
        "content",
        "cosine",
        "coverage",
        "crowding",
        "logit",
        "pk",
        "plain",
        "role",
        "row",
        "score_logit",
        "seq",
        "session_id",
    )

    def __init__(
        self,
        pk: int,
        row: tuple[Any, ...],
        cosine: float | None,
        coverage: float,
        crowding: float | None = None,
    ):
        self.pk = pk
        self.row = row
        self.seq = int(row[0])
        self.session_id = str(row[1])
        self.role = str(row[2])
        self.content = str(row[3])[:RANK_CHARS]
        self.cosine = cosine
        self.coverage = coverage
        self.crowding = crowding
        self.plain: float | None = None
        self.alike: frozenset[int] = frozenset()
        self.logit = 0.0
        self.score_logit = 0.0
        self._change: bool | None = None

    @property
    def change(self) -> bool:
        """Whether its content says something changed (``says_change``), read once."""
        if self._change is None:
            self._change = says_change(self.content)
        return self._change


def _said_logit(
    c: Candidate, *, asked: str | None, present: bool, by_role: float, by_change: float
) -> float:
    """What ``c``'s side and words of a change add to its logit (``candidate_logit``)."""
    logit = by_role if asked is not None and c.role == asked else 0.0
    if present and c.role == "user" and c.change:
        logit += by_change
    return logit


def candidate_logit(
    mode: str, c: Candidate, *, asked: str | None, cjk: bool, present: bool = True
) -> float:
    """``c``'s calibrated logit of holding evidence (``CALIBRATION``), for a question asking
    about ``asked``'s turns (``role_asked``), with CJK text or not, about the user's present
    or not (only then does a change count); a turn without a vector (not embedded
    yet, or a search by words) is judged by the ``text`` row."""
    if c.cosine is None:
        mode = "text"
    bias, by_meaning, by_crowd, by_cjk, by_words, by_role, by_change = CALIBRATION[mode]
    logit = bias + by_words * c.coverage
    if c.cosine is not None:
        # NOTE: a turn with no fellow candidate to compare with is as crowded as it is near.
        crowding = c.cosine if c.crowding is None else c.crowding
        logit += by_meaning * c.cosine + by_crowd * crowding + (by_cjk if cjk else 0.0)
    return logit + _said_logit(
        c, asked=asked, present=present, by_role=by_role, by_change=by_change
    )


def candidate_score_logit(
    mode: str,
    c: Candidate,
    *,
    asked: str | None,
    cjk: bool,
    present: bool = True,
    density: float = DENSITY_USUAL,
) -> float:
    """``c``'s logit as its ``score`` shows it: by ``SCORE`` from its plain cosine and the
    search's ``density`` (``search_density``) in a centred search, else its ranking's
    (``candidate_logit``)."""
    if mode not in SCORE or c.plain is None:
        return candidate_logit(mode, c, asked=asked, cjk=cjk, present=present)
    bias, by_meaning, by_cjk, by_words, by_role, by_change, by_density = SCORE[mode]
    logit = bias + by_meaning * c.plain + (by_cjk if cjk else 0.0) + by_words * c.coverage
    logit += by_density * (density - DENSITY_USUAL)
    return logit + _said_logit(
        c, asked=asked, present=present, by_role=by_role, by_change=by_change
    )


def search_density(candidates: list[Candidate]) -> float:
    """The mean plain cosine of the ``DENSITY_TURNS`` candidates nearest to the query by it
    (``DENSITY_USUAL`` where none has one)."""
    plain = sorted((c.plain for c in candidates if c.plain is not None), reverse=True)
    if not plain:
        return DENSITY_USUAL
    nearest = plain[:DENSITY_TURNS]
    return sum(nearest) / len(nearest)


def _lifted(logit: float, near: list[float]) -> float:
    """``logit`` lifted towards the best of its neighbours' (``NEIGHBOUR_SHARE``)."""
    if near and max(near) > logit:
        return logit + NEIGHBOUR_SHARE * (max(near) - logit)
    return logit


def score_of(logit: float) -> float:
    """A logit as the ``score`` a result carries: in [0, 1]."""
    if logit < -30:
        return 0.0
    return 1.0 / (1.0 + math.exp(-logit))


def ranked(
    candidates: list[Candidate], mode: str, limit: int, q: str, *, dated: bool = False
) -> list[Candidate]:
    """The best ``limit`` of ``candidates`` for ``q`` (``dated``: a search narrowed to dates, not
    about the present): by calibrated logit (``candidate_logit``), lifted towards a better
    neighbour's (``NEIGHBOUR_SHARE``) and favouring the newer (``RECENCY_WEIGHT``), then chosen one
    by one, holding back a session's later picks (``SESSION_PENALTY``) and repeats
    (``REPEAT_PENALTY``); about the user's present, a replacing turn ranks just above the one it
    replaces (``superseded``); results without the value asked (``SLOT_PENALTY``) or echoing the
    question unanswered (``ECHO_WEIGHT``) score lower."""
    if not candidates:
        return []
    asked = role_asked(q)
    present = asked == "user" and not dated and asks_present(q)
    cjk = CJK_RUN_RE.search(unicodedata.normalize("NFKC", q)) is not None
    # NOTE: a turn past the crowded ones read (fusion's features) is as crowded as they are.
    known = [c.crowding for c in candidates if c.crowding is not None]
    usual = sum(known) / len(known) if known else None
    for c in candidates:
        if c.crowding is None and c.cosine is not None and usual is not None:
            c.crowding = usual
    seqs = [c.seq for c in candidates]
    low, high = min(seqs), max(seqs)
    density = DENSITY_USUAL if dated else search_density(candidates)
    own = {
        c.seq: (
            candidate_logit(mode, c, asked=asked, cjk=cjk, present=present)
            + (SELF_WEIGHT if asked == c.role == "user" and says_of_self(c.content) else 0.0),
            candidate_score_logit(mode, c, asked=asked, cjk=cjk, present=present, density=density),
            c.session_id,
        )
        for c in candidates
    }
    for c in candidates:
        late = 0.0 if high == low else (c.seq - low) / (high - low)
        logit, shown, _ = own[c.seq]
        around = [own.get(c.seq - 1), own.get(c.seq + 1)]
        near = [n for n in around if n is not None and n[2] == c.session_id]
        c.score_logit = _lifted(shown, [n[1] for n in near])
        c.logit = _lifted(logit, [n[0] for n in near]) + RECENCY_WEIGHT * late
    # NOTE: the best ``POOL_PER_RESULT`` times ``limit`` are chosen from: the penalties are
    # bounded, so a candidate further down comes in only past many repeats. They only ever lower
    # a candidate's logit, so the pool is a heap of logits at most as high as they are now: the
    # top one whose logit is still that is the best by (logit held back, seq); another is put
    # back lower. A candidate's words are read, and compared with the picks since its last look,
    # only when it would be picked.
    ordered = sorted(candidates, key=lambda c: (-c.logit, -c.seq))
    pool = ordered[: max(limit * POOL_PER_RESULT, 30)]
    heap = [(-c.logit, -c.seq, i) for i, c in enumerate(pool)]
    terms: dict[int, frozenset[str]] = {}
    looked: dict[int, int] = {}
    repeated: set[int] = set()
    chosen: list[Candidate] = []
    taken: dict[str, int] = {}
    while heap and len(chosen) < limit:
        top, seq, i = heapq.heappop(heap)
        c = pool[i]
        logit = c.logit - SESSION_PENALTY * taken.get(c.session_id, 0)
        if c.pk in repeated:
            logit -= REPEAT_PENALTY
        elif logit == -top and _repeats(c, chosen, looked, terms):
            repeated.add(c.pk)
            logit -= REPEAT_PENALTY
        if logit != -top:
            heapq.heappush(heap, (-logit, seq, i))
            continue
        chosen.append(c)
        taken[c.session_id] = taken.get(c.session_id, 0) + 1
    if present:
        chosen = superseded(chosen, ordered[:SUPERSEDE_POOL], limit, q)
    _slot_checked(chosen, candidates, q, terms)
    return chosen


def _repeats(
    c: Candidate,
    chosen: list[Candidate],
    looked: dict[int, int],
    terms: dict[int, frozenset[str]],
) -> bool:
    """Whether ``c`` says again what a pick of ``chosen`` it has not been compared with yet said
    (at least ``REPEAT_SHARE`` of the shorter one's ``repeat_terms``); ``looked`` counts the
    picks each has been compared with, ``terms`` keeps what each says."""
    start = looked.get(c.pk, 0)
    looked[c.pk] = len(chosen)
    if start == len(chosen):
        return False
    held = _terms(c, terms)
    if not held:
        return False
    for b in chosen[start:]:
        said = _terms(b, terms)
        if (
            said
            and not held.isdisjoint(said)
            and len(held & said) >= REPEAT_SHARE * min(len(held), len(said))
        ):
            return True
    return False


def _terms(c: Candidate, terms: dict[int, frozenset[str]]) -> frozenset[str]:
    found = terms.get(c.pk)
    if found is None:
        found = terms[c.pk] = repeat_terms(c.content)
    return found


def superseded(
    chosen: list[Candidate], pool: list[Candidate], limit: int, q: str = ""
) -> list[Candidate]:
    """``chosen`` (at most ``limit``) with, from the top, the best of ``pool`` that replaces a
    user's result placed directly above it: a user's turn of a later session that says a change
    (``says_change``) and is alike (``ALIKE``), or, where ``q`` asks for a value both hold
    (``slot_held``), about as likely evidence (``NEWER_MARGIN``). A placed turn may be replaced
    in turn; each move places a later turn, so the pass ends."""
    kinds = slot_asked(q) - ACCOUNT_KINDS
    holds = {
        c.pk: any(slot_held(kind, stated(c.content), q) for kind in kinds) for c in (*chosen, *pool)
    }
    out = list(chosen)
    i = 0
    while i < len(out):
        old = out[i]
        later = [
            c
            for c in pool
            if old.role == "user"
            and c.role == "user"
            and c.seq > old.seq
            and c.session_id != old.session_id
            and (c not in out or out.index(c) > i)
            and (
                ((c.pk in old.alike or old.pk in c.alike) and c.change)
                or (holds[c.pk] and holds[old.pk] and c.logit >= old.logit - NEWER_MARGIN)
                or (
                    (c.pk in old.alike or old.pk in c.alike)
                    and c.logit >= old.logit - SAME_SUBJECT_MARGIN
                )
                or (c.change and c.logit >= old.logit - CHANGE_MARGIN)
            )
        ]
        if later:
            new = max(later, key=lambda c: (c.logit, c.seq))
            if new in out:
                out.remove(new)
            out.insert(i, new)
            continue
        i += 1
    return out[:limit]


def _slot_checked(
    chosen: list[Candidate],
    candidates: list[Candidate],
    q: str,
    terms: dict[int, frozenset[str]] | None = None,
) -> None:
    """Each of ``chosen``'s ``score_logit`` less ``SLOT_PENALTY`` where ``q`` asks for a value
    (``slot_asked``) that it does not hold (``slot_held``); a turn of the other side than the
    one asked about (``role_asked``) by the turn of that side just after or before it in its
    session (the reply to a question: its ``context``). One holding no value asked loses
    ``ECHO_WEIGHT`` per share of ``q``'s subject terms it repeats beyond ``ECHO_FREE``; ``terms``:
    the results' ``repeat_terms``, where read already."""
    kinds = slot_asked(q)
    wanted = subject_terms(q)
    asked = role_asked(q)
    thing = thing_asked(q)
    by_seq = {c.seq: c for c in candidates}
    for c in chosen:
        said = [c]
        if asked is not None and c.role != asked:
            near = (by_seq.get(c.seq + 1), by_seq.get(c.seq - 1))
            said += [n for n in near if n and n.session_id == c.session_id and n.role == asked]
        if kinds and any(slot_held(kind, n.content, q) for kind in kinds for n in said):
            continue
        if kinds:
            c.score_logit -= SLOT_PENALTY
        elif thing and not any(thing_held(n.content, q) for n in said):
            c.score_logit -= THING_PENALTY
        if wanted:
            held = terms[c.pk] if terms and c.pk in terms else repeat_terms(c.content)
            c.score_logit -= ECHO_WEIGHT * max(0.0, len(wanted & held) / len(wanted) - ECHO_FREE)
