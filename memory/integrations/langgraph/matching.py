"""How ``MemoryStore`` matches: LangGraph's filters on a value, a listing's conditions on a
namespace, and a query's words in a fact."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from langgraph.store.base import MatchCondition, SearchItem

from memory import codec, search

# The filter operators of LangGraph's stores.
NUMBER_OPERATORS = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}
OPERATORS = {"$eq", "$ne", *NUMBER_OPERATORS}
WORD_RE = re.compile(r"\w+")


def filter_check(spec: Any) -> None:
    if isinstance(spec, dict):
        for name, expected in spec.items():
            if not isinstance(name, str):
                raise ValueError(f"A filter's keys are strings; got {name!r}.")
            if name.startswith("$") and name not in OPERATORS:
                raise ValueError(
                    f"Unsupported filter operator {name!r}: use {', '.join(sorted(OPERATORS))}."
                )
            filter_check(expected)
    elif isinstance(spec, (list, tuple)):
        for expected in spec:
            filter_check(expected)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_equal(value: Any, expected: Any) -> bool:
    # NOTE: as jsonb compares: 1 and 1.0 are equal, true and 1 are not.
    if is_number(value) and is_number(expected):
        return bool(value == expected)
    return codec.json_equal(value, expected)


def filter_matches(value: Any, expected: Any) -> bool:
    """Whether ``value`` matches ``expected`` as a LangGraph filter does: objects by their
    keys (recursively; a dotted key also as a path, ``field_at``), arrays element by element,
    operators (``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``; the last four match
    numbers only), else equal JSON."""
    if isinstance(expected, dict):
        if any(name.startswith("$") for name in expected):
            return all(operator_matches(value, name, operand) for name, operand in expected.items())
        return isinstance(value, dict) and all(
            filter_matches(field_at(value, name), operand) for name, operand in expected.items()
        )
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(value, list)
            and len(value) == len(expected)
            and all(filter_matches(a, b) for a, b in zip(value, expected, strict=True))
        )
    return json_equal(value, expected)


def field_at(value: dict[str, Any], name: str) -> Any:
    """The field ``name`` of an object: its key ``name`` (as ``PostgresStore`` reads a filter
    key), else, for a dotted name, the path through nested objects (as ``SqliteStore`` reads
    ``"user.access-level"``); ``None`` when there is neither."""
    if name in value or "." not in name:
        return value.get(name)
    found: Any = value
    for part in name.split("."):
        if not isinstance(found, dict) or part not in found:
            return None
        found = found[part]
    return found


def operator_matches(value: Any, name: str, operand: Any) -> bool:
    if name == "$eq":
        return json_equal(value, operand)
    if name == "$ne":
        return not json_equal(value, operand)
    return is_number(value) and is_number(operand) and bool(NUMBER_OPERATORS[name](value, operand))


def normal(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def text_words(text: str) -> list[str]:
    """The words of normalised ``text`` outside its CJK runs."""
    return [w for word in WORD_RE.findall(text) for w in search.CJK_RUN_RE.split(word) if w]


def query_units(text: str) -> list[str]:
    """What a query is matched by: its words, and the overlapping pairs of its CJK runs (one
    character alone), after NFKC and case folding."""
    text = normal(text)
    units = text_words(text)
    for run in search.CJK_RUN_RE.findall(text):
        units.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
    return units


def words_score(item: SearchItem, key: str, units: list[str]) -> float:
    """The share of the query's ``units`` found in the fact's key or value (as JSON text): a
    word as a whole word, a CJK pair anywhere."""
    text = normal(f"{key} {codec.dumps(item.value).decode()}")
    held = set(text_words(text))
    found = sum(unit in text if search.CJK_RUN_RE.match(unit) else unit in held for unit in units)
    return found / len(units)


def condition_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "suffix":
        namespace, path = namespace[::-1], path[::-1]
    return all(p in ("*", n) for n, p in zip(namespace, path, strict=False))
