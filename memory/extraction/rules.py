"""The rule-based extractor for English and Chinese: sentences, clauses, and what one clause
tells the next (the rules themselves are in ``english`` and ``chinese``, their value checks in
``values``)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from memory.extraction.base import LIST_KEYS, STRING_KEYS, ExtractedFact
from memory.extraction.changes import (
    _EN_CHANGE_RULES,
    _ZH_CHANGE_CARRY,
    _ZH_CHANGE_RULES,
    CHANGE_LIST_KEYS,
)
from memory.extraction.chinese import (
    _ZH_CALL_ME_REQUEST,
    _ZH_CARRY,
    _ZH_CLAUSE_BREAK,
    _ZH_FILLER,
    _ZH_FIRST_PERSON,
    _ZH_LIST_CLOSE,
    _ZH_NEGATED,
    _ZH_QUESTION,
    _ZH_RULES,
    _ZH_RUN_ON,
)
from memory.extraction.english import (
    _EN_APPOSITIVE,
    _EN_CALL_ME_REQUEST,
    _EN_CARRY,
    _EN_CLAUSE_BREAK,
    _EN_FILLER,
    _EN_FIRST_PERSON,
    _EN_IT_IS,
    _EN_LIST_CLOSE,
    _EN_QUESTION_START,
    _EN_RULES,
    _EN_RUN_ON,
)
from memory.extraction.text import _HAN_RE, _fold, _is_han
from memory.extraction.values import _EN_NEG, _items_en, _items_zh

_SENTENCE_END = re.compile(r"[。！？!?；;\n…]+|\.+(?=\s|$|[\"')\]])")
_ABBREVIATION = re.compile(
    r"(?:\b(?:Mr|Mrs|Ms|Dr|Drs|St|Mt|Jr|Sr|Prof|Rev|Capt|Lt|Col|Gen|Sgt|vs|etc|approx|No)|\b[A-Z])$"
)
_AFTER_ABBREVIATION_NEW = re.compile(r"\s*(?:I|I'm|My|Call|You|Please|And|But|Also)\b")
_QUOTED = re.compile(r"\"[^\"\n]{4,}\"|“[^”\n]{4,}”|「[^」]*」|『[^』]*』|```.*?```", re.S)
_QUOTE_LINE = re.compile(r"^\s*>.*$", re.M)
# NOTE: every English rule starts at an anchor ("I", "my", "call me", "name is"...), or follows a
# clause that had one: ASCII text with none states nothing, and skips every rule. Searched in
# ASCII text only, so by ASCII classes (no Unicode lookup per character), with Unicode's spaces.
_EN_ANCHOR = re.compile(
    r"\b(?:i|im|my|we|our|sold)\b|\bname(?:'s|[\s\x1c-\x1f]+is)\b|\bcalls?[\s\x1c-\x1f]+me\b",
    re.I | re.A,
)

# NOTE: the rules of what changed first: they are specific, and an older rule would read "I
# sold my car and bought ..." or "我在小米工作" otherwise.
_EN_ALL = (*_EN_CHANGE_RULES, *_EN_RULES)
_ZH_ALL = (*_ZH_CHANGE_RULES, *_ZH_RULES)


@dataclass
class _Found:
    key: str
    values: list[str]
    negated: bool


class RuleBasedExtractor:
    """The built-in extractor: regular rules for English and Chinese (see docs/extraction.md).

    Writes the contract's keys; reads only statements the user makes about themselves, clause
    by clause, and writes nothing from questions, negations, hypotheticals, reported speech or
    statements about someone else. Turns longer than ``max_chars`` (pasted text) are skipped.
    """

    max_chars = 2000

    def extract(self, text: str, *, facts: Mapping[str, Any] | None = None) -> list[ExtractedFact]:
        if not text or len(text) > self.max_chars:
            return []
        if text.isascii() and not _EN_ANCHOR.search(text):
            return []
        text = _QUOTE_LINE.sub(" ", _QUOTED.sub(lambda m: " " * len(m.group()), text))
        found: list[ExtractedFact] = []
        state = _State()
        for sentence, asked in self._sentences(text):
            state.sentence_start()
            clauses = self._clauses(sentence)
            for i, (orig, norm) in enumerate(clauses):
                question = asked and i == len(clauses) - 1
                for fact in state.clause(orig, norm, question=question):
                    if fact not in found:
                        found.append(fact)
        return found

    @staticmethod
    def _sentences(text: str) -> Iterator[tuple[str, bool]]:
        """``text`` cut into sentences, each with whether it ended with a question mark."""
        folded = _fold(text)
        start = 0
        for m in _SENTENCE_END.finditer(folded):
            end = m.group()
            # NOTE: "Dr. Smith" goes on; "the U.S. I like golf" ends after "U.S." and keeps its dot.
            abbreviation = end == "." and _ABBREVIATION.search(folded, start, m.start())
            if abbreviation and not _AFTER_ABBREVIATION_NEW.match(folded, m.end()):
                continue
            yield text[start : m.end() if abbreviation else m.start()], "?" in end or "？" in end
            start = m.end()
        yield text[start:], False

    @staticmethod
    def _clauses(sentence: str) -> list[tuple[str, str]]:
        """A sentence cut into clauses, each as (original, folded) text of the same length."""
        folded = _fold(sentence)
        # NOTE: in ASCII text the Chinese breaks can only find the commas, colons and brackets
        # the English ones cut at too, and a Chinese run-on none: a third of the time saved.
        ascii_only = folded.isascii()
        cuts: list[tuple[int, int]] = []
        for pattern in (_EN_CLAUSE_BREAK,) if ascii_only else (_EN_CLAUSE_BREAK, _ZH_CLAUSE_BREAK):
            cuts.extend(
                (m.start(), m.end()) for m in pattern.finditer(folded) if m.end() > m.start()
            )
        for pattern in (_EN_RUN_ON,) if ascii_only else (_ZH_RUN_ON, _EN_RUN_ON):
            for m in pattern.finditer(folded):
                left = folded[: m.start()]
                last = max([0, *(e for s, e in cuts if e <= m.start())])
                left = left[last:].lstrip()
                first_person = _ZH_FIRST_PERSON.match(left) or _EN_FIRST_PERSON.match(left)
                # NOTE: "I don't think I like golf" states no like.
                if first_person and not _EN_NEG.search(left) and not re.search("不|没", left):
                    cuts.append((m.start(), m.end()))
        clauses, start = [], 0
        for s, e in sorted(cuts):
            if s < start:
                continue
            clauses.append((sentence[start:s], folded[start:s]))
            start = e
        clauses.append((sentence[start:], folded[start:]))
        return [(o.strip(), n.strip()) for o, n in clauses if n.strip()]


class _State:
    """What one turn's earlier clauses tell the next: who spoke, what was negated, an open list."""

    def __init__(self) -> None:
        self.first_person = False
        self.last_name = False
        self.negated_key: str | None = None
        self.open_list: tuple[str, list[str]] | None = None
        self.pending: list[str] = []

    def sentence_start(self) -> None:
        self._close_list()
        self.negated_key = None

    def _close_list(self) -> list[ExtractedFact]:
        self.open_list, self.pending = None, []
        return []

    def clause(self, orig: str, norm: str, *, question: bool) -> list[ExtractedFact]:
        closing = bool(_EN_LIST_CLOSE.search(norm) or _ZH_LIST_CLOSE.search(norm))
        orig, norm = _strip_fillers(orig, norm)
        if not norm:
            return []
        request = _EN_CALL_ME_REQUEST.match(norm) or _ZH_CALL_ME_REQUEST.match(norm)
        if request:
            orig, norm = orig[request.start(1) : request.end(1)], request.group(1)
            question = False
        elif question or _is_question(norm):
            self.first_person = False
            self._close_list()
            return []
        listed = self._continue_list(orig, norm, closing=closing)
        if listed is not None:
            return listed
        hit = self._match(orig, norm)
        if hit is None and self.first_person:
            hit = self._carry(orig, norm)
        if hit is None and self.negated_key and _EN_IT_IS.match(norm):
            hit = self._it_is(orig, norm)
        if hit is None:
            self.first_person = bool(_EN_FIRST_PERSON.match(norm) or _ZH_FIRST_PERSON.match(norm))
            self.last_name = False
            self.negated_key = None
            return self._close_list()
        self.first_person = True
        self.last_name = hit.key == "name" and not hit.negated
        self.negated_key = hit.key if hit.negated else None
        self._close_list()
        if hit.negated:
            return []
        if hit.key in CHANGE_LIST_KEYS:
            return [ExtractedFact(hit.key, value, "add") for value in hit.values]
        if hit.key in LIST_KEYS:
            self.open_list = (hit.key, list(hit.values))
            return _list_facts(hit.key, hit.values)
        return [ExtractedFact(hit.key, hit.values[0], "set")]

    def _match(self, orig: str, norm: str) -> _Found | None:
        han = _is_han(norm[:1])
        for rule in _ZH_ALL if han else _EN_ALL:
            m = rule.pattern.match(norm)
            if m is None:
                continue
            raw = orig[m.start("v") : m.end("v")]
            values = rule.check(raw, m)
            if not values:
                continue
            if rule.negative:
                negated = False
            elif han:
                negated = bool(_ZH_NEGATED.match(norm))
            else:
                negated = bool(_EN_NEG.search(norm[: m.start("v")]))
            if not negated and not han and _EN_NEG.search(_fold(raw)):
                continue
            return _Found(rule.key, values, negated)
        return None

    def _carry(self, orig: str, norm: str) -> _Found | None:
        """A clause that leaves out its subject after a first-person one ("我叫王建国，喜欢打篮球",
        "I like tea but hate coffee", "I'm Ana, a nurse")."""
        if _ZH_CARRY.match(norm) and not norm.startswith("我"):
            return self._match("我" + orig, "我" + norm)
        if _ZH_CHANGE_CARRY.match(norm) and not norm.startswith("我"):
            return self._match("我" + orig, "我" + norm)
        if _EN_CARRY.match(norm):
            prefix = "I " if not norm.startswith(("am ", "'m ")) else "I"
            return self._match(prefix + orig, prefix + norm)
        if self.last_name and _EN_APPOSITIVE.match(norm):
            return self._match("I'm " + orig, "I'm " + norm)
        return None

    def _it_is(self, orig: str, norm: str) -> _Found | None:
        """ "My name is not Bob, it's Rob": the value of the key the last clause negated."""
        m = _EN_IT_IS.match(norm)
        assert m is not None and self.negated_key is not None
        raw = orig[m.start("v") : m.end("v")]
        key = self.negated_key
        for rule in _EN_RULES:
            if rule.key == key and key in STRING_KEYS:
                values = rule.check(raw, m)
                if values:
                    return _Found(key, values, False)
        return None

    def _continue_list(self, orig: str, norm: str, *, closing: bool) -> list[ExtractedFact] | None:
        """ "I like tennis, golf and chess": bare items after a list clause, closed by "and"."""
        if self.open_list is None:
            return None
        key, _ = self.open_list
        han = _is_han(norm[:1])
        if _EN_FIRST_PERSON.match(norm) or _ZH_FIRST_PERSON.match(norm):
            self._close_list()
            return None
        if han:
            ok = len(norm) <= 16 and not _ZH_CARRY.match(norm)
            items = _items_zh(orig) if ok else []
        else:
            ok = len(norm.split()) <= 6 and not _EN_CARRY.match(norm)
            items = _items_en(orig) if ok else []
        if not items:
            self._close_list()
            return None
        self.pending.extend(items)
        if not closing:
            return []
        found = _list_facts(key, self.pending)
        self._close_list()
        return found


def _list_facts(key: str, items: list[str]) -> list[ExtractedFact]:
    other = "dislikes" if key == "likes" else "likes"
    facts = []
    for item in items:
        facts.append(ExtractedFact(key, item, "add"))
        # NOTE: a like now is no longer a dislike, and the other way round.
        facts.append(ExtractedFact(other, item, "remove"))
    return facts


def _strip_fillers(orig: str, norm: str) -> tuple[str, str]:
    """The clause without its leading fillers ("well, actually", "对了，其实")."""
    while True:
        m = _EN_FILLER.match(norm) or _ZH_FILLER.match(norm)
        if m is None or m.end() == 0:
            return orig.strip(), norm.strip()
        orig, norm = orig[m.end() :], norm[m.end() :]


def _is_question(norm: str) -> bool:
    if _is_han(norm[:1]) or _HAN_RE.search(norm[:4]):
        return bool(_ZH_QUESTION.search(norm))
    return bool(_EN_QUESTION_START.match(norm)) or norm.rstrip().endswith("?")
