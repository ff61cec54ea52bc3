"""Fusing what a search found into one ranking: the calibrated score of a turn (its cosine to
the query, corrected for how close it is to every other candidate; the share of the query's
words it holds; whether it was said by the side the question asks about; whether it says that
something changed), and the order the results are chosen in (a better neighbour lifts a turn,
the newer of two alike ranks first, a session's later turns and a turn saying again what a
chosen one said yield to others). Pure Python over the candidates' features, no I/O."""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

from memory.search import CJK_RUN_RE, cjk_grams, query_split

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
# NOTE: the ``score`` a result of a centred search shows: the same model fitted on the plain
# cosine instead (no crowding), which tells a question about something never said apart
# better than the centred one, which ranks better (docs/recall.md, "The score"). Its bias and
# the weights of the plain cosine, of CJK text, of coverage, of the side asked, of a change,
# and of the search's ``density`` over ``DENSITY_USUAL``.
SCORE: dict[str, tuple[float, ...]] = {
    #          bias   cosine  cjk    coverage  role  change  density
    "hybrid": (-46.5, 49.3, -3.14, 4.0, 2.4, 2.0, 50.0),
    "semantic": (-46.16, 49.13, -3.22, 0.0, 2.4, 2.0, 50.0),
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
# The results are chosen from the best this many times their number (at least 30).
POOL_PER_RESULT = 3
# A candidate gains this share of what its best neighbour in the session (the turn just before
# or after) scores above it: the reply to a question that matches, the question of a reply.
NEIGHBOUR_SHARE = 0.5
# A match of the typo fallback counts as this share of the query's words.
SIMILAR_COVERAGE = 0.5
# NOTE: supersession, in a question about the user's present: a user's turn among the best
# ``SUPERSEDE_POOL`` candidates that says something changed (``says_change``), said in a later
# session than a result of the user and about the same subject (a cosine similarity of at least
# ``ALIKE`` between the two turns, measured as the search measured: ``ranking.turns_features``)
# ranks directly above that result: what was true is replaced by what is. A rule, not a weight.
ALIKE = 0.2
SUPERSEDE_POOL = 10
# NOTE: a question asking for a value (a number, a name, a colour, a date: ``slot_asked``) whose
# best ``SLOT_TURNS`` results hold no value of that kind (``slot_held``) is likely about
# something never said (a near miss on its subject: "my son needs new football boots" for
# "what shoe size does my son wear?"): the score of each result loses ``SLOT_PENALTY`` logits.
# The order is unchanged. Chosen on the abstention of the team's quality set
# (docs/recall.md, "The score").
SLOT_TURNS = 3
SLOT_PENALTY = 4.0

# NOTE: a question about what the assistant said names it doing so ("what did you suggest",
# "you told me", "你上次说", "你推荐的"); any other question in the first person ("my", "we",
# "我") asks about the user: a request ("can you recommend ... for me") included, since what
# it needs is what the user said of themselves.
_ASSISTANT_EN = re.compile(
    r"\b(?:you|you've|you'd)\s+(?:\w+\s+)?(?:said|say|told|tell|suggested|suggest|recommended|"
    r"mentioned|pointed|showed|show|gave|quoted|explained|proposed|named|listed|shared|taught|"
    r"described|advised|warned|meant|called)\b|\bdid you\b|\bwas (?:the|that) \w+ you\b"
)
_ASSISTANT_ZH = re.compile(
    r"你(?:上次|之前|以前|那次|刚才|前几天|当时)?(?:跟我|给我|帮我|对我|向我)?"
    r"(?:说|讲|提|告诉|推荐|建议|教|介绍|给的|列|举)"
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|my|me|mine|we|we're|we've|our|us)\b|我")


def role_asked(q: str) -> str | None:
    """The side whose turns answer ``q``: ``assistant`` for a question about what the
    assistant said, ``user`` for another question in the first person, else ``None``."""
    text = unicodedata.normalize("NFKC", q).lower()
    if _ASSISTANT_EN.search(text) or _ASSISTANT_ZH.search(text):
        return "assistant"
    if _FIRST_PERSON.search(text):
        return "user"
    return None


# NOTE: the words of a change: a state left for another ("sold the Golf and bought", "moved
# to", "no longer", "我换了", "搬到了", "不再"). A user's turn that holds one says what is
# true now, so it ranks above the statement it replaced when both match alike.
_CHANGE_EN = re.compile(
    r"\b(?:now|nowadays|these days|anymore|any more|no longer|instead|switched|switching to|"
    r"changed|moved|relocated|sold|traded|replaced|upgraded|quit|left|resigned|retired|"
    r"cancell?ed|gave up|stopped|dropped|took up|picked up|started|joined|became|"
    r"transferred|finally|just (?:got|bought|started|moved|left|switched))\b"
)
_CHANGE_ZH = re.compile(
    r"现在|如今|目前|不再|换了|换成|改成|改用|改为|搬到|搬去|搬家|卖了|卖掉|辞职|离职|跳槽|"
    r"转去|转到|调到|退了|戒了|又开始|入职|升职|新买"
)


# NOTE: a question about a past time ("what did I weigh at the start of the year", "年初的时候")
# asks for what was true then, not for what changed since: the words of a change count only
# in a question about the present.
_PAST_EN = re.compile(
    r"\b(?:did|was|were|had|used to|ago|back in|back then|at the time|at first|originally|"
    r"before|first|start of|beginning of)\b"
)
_PAST_ZH = re.compile(r"的时候|那时|当时|以前|之前|原来|最早|最初|年初|年底|刚开始|那会")


def asks_present(q: str) -> bool:
    """Whether ``q`` asks about the present: no word of a past time in it."""
    text = unicodedata.normalize("NFKC", q).lower()
    return not (_PAST_EN.search(text) or _PAST_ZH.search(text))


def says_change(content: str) -> bool:
    """Whether ``content`` holds a word of a change (``_CHANGE_EN``, ``_CHANGE_ZH``)."""
    text = unicodedata.normalize("NFKC", content).lower()
    return bool(_CHANGE_EN.search(text) or _CHANGE_ZH.search(text))


_WORD_RE = re.compile(r"\w+")


# NOTE: what a question asking for a value asks for, and what a turn holding one says: a number
# ("how much", "what size", "多少", "几岁"), a name ("what's my cat called", "叫什么"), a colour,
# a date ("when", "哪一天"). A "which" question is not one: a thing answers it as well as a name.
_SLOTS: dict[str, re.Pattern[str]] = {
    "number": re.compile(
        r"\bhow (?:much|many|old|long|far|tall|heavy|big|often)\b|\bwhat (?:\w+ )?(?:size|"
        r"score|grade|mark|number|price|percentage|weight|height|age)\b|\bdid i (?:score|pay|"
        r"weigh|get)\b|多少|几[个岁次号点条只辆位名]|多大|多重|多高|多长|多久|多远"
    ),
    "name": re.compile(r"\bname\b|\bcalled\b|\bwho\b|叫什么|名字|是谁"),
    "colour": re.compile(r"\bcolou?r\b|颜色|什么色"),
    "date": re.compile(r"\bwhen\b|\bwhat (?:day|date)\b|哪天|哪一天|什么时候|几号|几月"),
}
_NUMBER_EN = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
    r"thirty|forty|fifty|hundred|thousand|dozen|half|grand)\b"
)
_NUMBER_ZH = re.compile(
    r"[一两二三四五六七八九十百千万半][个岁次号点年月天块元斤码分米周倍层条只本辆套间张台件位名]"
)
_DATE_WORDS = re.compile(
    r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|"
    r"april|may|june|july|august|september|october|november|december)\b|[月号日]|周[一二三四五六日]"
)
_NOT_NAMES_TEXT = (
    "monday tuesday wednesday thursday friday saturday sunday january february march april may"
    " june july august september october november december i i'm i've i'd i'll ok"
)
_NOT_NAMES = frozenset(_NOT_NAMES_TEXT.split())
_COLOURS = re.compile(
    r"\b(?:red|blue|green|yellow|white|black|grey|gray|pink|purple|orange|brown|beige|cream|"
    r"teal|navy|sage|olive|turquoise|lilac|mint|ochre|terracotta)\b|[红蓝绿黄白黑灰粉紫橙棕褐青米]色"
)
_NAME_ZH = re.compile(
    r"叫[\u4e00-\u9fff]|[“「《\"]|[\u4e00-\u9fff]{2,}(?:酒店|宾馆|医院|公司|学校|大学|餐厅|队|"
    r"俱乐部|航空|银行)"
)
_SENTENCE_RE = re.compile(r"[.!?;:]\s+|\n")
_NAME_WORD_RE = re.compile(r"[\w&'-]+")


def slot_asked(q: str) -> frozenset[str]:
    """The kinds of value ``q`` asks for (``number``, ``name``, ``colour``, ``date``); empty
    for a question that asks for none."""
    text = unicodedata.normalize("NFKC", q).lower()
    return frozenset(kind for kind, pattern in _SLOTS.items() if pattern.search(text))


def slot_held(kind: str, content: str, q: str) -> bool:
    """Whether ``content`` holds a value of ``kind`` (``slot_asked``): a number in digits or
    words, a colour, a date (a number, a weekday, a month), a name (a capitalised word not
    opening its sentence nor in ``q``; in Chinese, a name said with 叫, quoted, in Latin letters,
    or of an institution)."""
    text = unicodedata.normalize("NFKC", content)
    lower = text.lower()
    if kind in ("number", "date"):
        if _NUMBER_EN.search(lower) or _NUMBER_ZH.search(text):
            return True
        return kind == "date" and _DATE_WORDS.search(lower) is not None
    if kind == "colour":
        return _COLOURS.search(lower) is not None
    asked = {word.lower() for word in _WORD_RE.findall(unicodedata.normalize("NFKC", q))}
    for sentence in _SENTENCE_RE.split(text):
        for word in _NAME_WORD_RE.findall(sentence)[1:]:
            name = word[0].isascii() and word[0].isupper()
            if name and word.lower() not in _NOT_NAMES and word.lower() not in asked:
                return True
    if CJK_RUN_RE.search(text) and re.search(r"[A-Za-z]{2,}", text):
        return True
    return _NAME_ZH.search(text) is not None


_COMMON_TEXT = (
    "a an and are as at be but by can could did do does for from had has have how i if in is"
    " it me my of on or our should so that the this to was we what when where which who will"
    " with would you your"
)
_COMMON = frozenset(_COMMON_TEXT.split())


def repeat_terms(content: str) -> frozenset[str]:
    """The terms two turns share when they say the same: lower-cased words but common ones,
    and CJK pairs."""
    words, runs = query_split(content.lower())
    terms = {word for word in _WORD_RE.findall(words) if word not in _COMMON}
    for run in runs:
        terms.update(cjk_grams(run).split())
    return frozenset(terms)


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
    """The best ``limit`` of ``candidates`` for ``q`` (a search narrowed to a range of dates
    where ``dated``: not about the present): by calibrated logit (``candidate_logit``),
    lifted towards a better neighbour's (``NEIGHBOUR_SHARE``; the score's logit, lifted alike,
    is each one's ``score_logit``) and with the newer favoured
    (``RECENCY_WEIGHT``), then chosen one by one, each session's later picks held back
    (``SESSION_PENALTY``) and a turn that says again what a chosen one said held back more
    (``REPEAT_PENALTY``); in a question about the user's present, a later turn that replaces a
    result ranks directly above it (``superseded``); the scores of a question asking for a
    value none of the best results holds are lowered (``SLOT_PENALTY``)."""
    if not candidates:
        return []
    asked = role_asked(q)
    # NOTE: the user's own state: a question in the first person about the present.
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
    density = search_density(candidates)
    own = {
        c.seq: (
            candidate_logit(mode, c, asked=asked, cjk=cjk, present=present),
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
    # bounded, so a candidate further down comes in only past many repeats; each pick marks the
    # ones that repeat it, so choosing is O(limit x pool) set comparisons.
    ordered = sorted(candidates, key=lambda c: (-c.logit, -c.seq))
    pool = ordered[: max(limit * POOL_PER_RESULT, 30)]
    terms = {c.pk: repeat_terms(c.content) for c in pool}
    repeated: set[int] = set()
    # The pool's candidates a pick may still mark as repeating it: with terms, not marked yet.
    unmarked = [c for c in pool if terms[c.pk]]
    chosen: list[Candidate] = []
    taken: dict[str, int] = {}
    while pool and len(chosen) < limit:
        # NOTE: the best by (logit held back, seq), written out: this loop is most of a
        # search's CPU in Python.
        best = pool[0]
        best_logit = -math.inf
        for c in pool:
            logit = c.logit - SESSION_PENALTY * taken.get(c.session_id, 0)
            if c.pk in repeated:
                logit -= REPEAT_PENALTY
            if logit > best_logit or (logit == best_logit and c.seq > best.seq):
                best, best_logit = c, logit
        pool.remove(best)
        chosen.append(best)
        taken[best.session_id] = taken.get(best.session_id, 0) + 1
        said = terms[best.pk]
        if said:
            still = []
            for c in unmarked:
                if c is best:
                    continue
                held = terms[c.pk]
                if not held.isdisjoint(said) and len(held & said) >= REPEAT_SHARE * min(
                    len(held), len(said)
                ):
                    repeated.add(c.pk)
                else:
                    still.append(c)
            unmarked = still
        else:
            unmarked = [c for c in unmarked if c is not best]
    if present:
        chosen = superseded(chosen, ordered[:SUPERSEDE_POOL], limit)
    _slot_checked(chosen, q)
    return chosen


def superseded(chosen: list[Candidate], pool: list[Candidate], limit: int) -> list[Candidate]:
    """``chosen`` (at most ``limit``) with each user's result followed, from the top, by the
    best of ``pool`` that replaces it, moved or brought in directly above it: a user's turn of
    a later session that says something changed (``says_change``) and is alike (``alike``:
    ``ALIKE``). A turn placed so is itself replaced in turn; every move places a later turn,
    so the pass ends."""
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
            and (c.pk in old.alike or old.pk in c.alike)
            and (c not in out or out.index(c) > i)
            and c.change
        ]
        if later:
            new = max(later, key=lambda c: (c.logit, c.seq))
            if new in out:
                out.remove(new)
            out.insert(i, new)
            continue
        i += 1
    return out[:limit]


def _slot_checked(chosen: list[Candidate], q: str) -> None:
    """Each of ``chosen``'s ``score_logit`` less ``SLOT_PENALTY`` where ``q`` asks for a value
    (``slot_asked``) that none of the best ``SLOT_TURNS`` holds (``slot_held``)."""
    kinds = slot_asked(q)
    if not kinds or not chosen:
        return
    best = chosen[:SLOT_TURNS]
    if any(slot_held(kind, c.content, q) for kind in kinds for c in best):
        return
    for c in chosen:
        c.score_logit -= SLOT_PENALTY
