"""Text helpers of the rule-based extractor, shared by its English and Chinese rules: folding,
scripts, value edges, and the shape of a rule."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from memory.extraction.base import MAX_VALUE_CHARS

# NOTE: rules match a folded copy (full-width to ASCII, curly quotes to straight, traditional to
# simplified), one character for one, so offsets cut the original and values keep what was typed.
_FOLD = {cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)}
_FOLD.update({0x2019: ord("'"), 0x2018: ord("'"), 0x201C: ord('"'), 0x201D: ord('"')})
_FOLD[0x3000] = ord(" ")
_FOLD.update(
    str.maketrans(
        "歡討厭說語會講師員醫職業這們麼嗎從對喜愛為種個國話車還沒辦搬書網誰裡過後來實際們樂",
        "欢讨厌说语会讲师员医职业这们么吗从对喜爱为种个国话车还没办搬书网谁里过后来实际们乐",
    )
)


def _fold(text: str) -> str:
    return text.translate(_FOLD)


_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAN_RE = re.compile(f"[{_HAN}]")
_I = re.IGNORECASE


def _set(words: str) -> frozenset[str]:
    """The whitespace-separated ``words``."""
    return frozenset(words.split())


def _words(words: str) -> str:
    """A regex alternation of the ``|``-separated ``words`` (a space matches any whitespace),
    longest first."""
    ordered = sorted(set(words.split("|")), key=len, reverse=True)
    return "(?:" + "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in ordered) + ")"


_EDGE_LEAD = re.compile(r"^[\s\"'“‘「『(\[*_~,，:：\-]+")
_EDGE_TRAIL = re.compile(r"[^\w)\]]+$")


def _edges(value: str) -> str:
    """``value`` without surrounding quotes, punctuation, emoji and space ("U.S." keeps its dot)."""
    value = _EDGE_LEAD.sub("", value)
    trimmed = _EDGE_TRAIL.sub("", value).strip()
    if re.search(r"\b(?:[A-Z]\.)+[A-Z]$", trimmed) and value[len(trimmed) :].startswith("."):
        trimmed += "."
    return trimmed


def _cut(value: str, pattern: re.Pattern[str]) -> str:
    """``value`` up to the first match of ``pattern`` (found in its folded copy)."""
    m = pattern.search(_fold(value))
    return value[: m.start()] if m else value


def _strip_lead(value: str, pattern: re.Pattern[str]) -> str:
    m = pattern.match(_fold(value))
    return value[m.end() :] if m else value


def _fits(value: str) -> bool:
    return 0 < len(value) <= MAX_VALUE_CHARS and "\n" not in value


def _is_han(value: str) -> bool:
    return bool(_HAN_RE.search(value))


@dataclass(frozen=True)
class _Rule:
    """A pattern anchored at the start of a clause; group ``v`` holds the value.

    ``check`` cleans ``v`` and returns the values it yields (empty: the rule does not apply).
    A ``negative`` rule states a negation itself ("I don't like X" → dislikes); any other rule
    whose clause holds a negation before ``v`` yields no fact ("My name is not Bob").
    """

    key: str
    pattern: re.Pattern[str]
    check: Callable[[str, re.Match[str]], list[str]]
    negative: bool = False


def _one(fn: Callable[[str], str | None]) -> Callable[[str, re.Match[str]], list[str]]:
    def check(value: str, m: re.Match[str]) -> list[str]:
        result = fn(value)
        return [result] if result else []

    return check


def _items(fn: Callable[[str], list[str]]) -> Callable[[str, re.Match[str]], list[str]]:
    return lambda value, m: fn(value)


def _r(
    key: str,
    pattern: str,
    check: Callable[[str, re.Match[str]], list[str]],
    *,
    negative: bool = False,
) -> _Rule:
    return _Rule(key, re.compile(pattern, _I), check, negative)


def _rules(
    key: str,
    check: Callable[[str, re.Match[str]], list[str]],
    *patterns: str,
    negative: bool = False,
) -> tuple[_Rule, ...]:
    """A rule of ``key`` read by ``check`` for each of ``patterns``, tried in their order."""
    return tuple(_r(key, pattern, check, negative=negative) for pattern in patterns)
