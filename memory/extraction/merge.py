"""Merge rules: how extracted facts change an owner's current facts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from memory.codec import json_equal, json_key
from memory.extraction.base import MAX_LIST_ITEMS, OPS, ExtractedFact, logger


def _same_item(item: Any) -> Any:
    # NOTE: JSON's equality for items that are not text: ``true`` is not the item ``1``.
    return ("text", item.casefold()) if isinstance(item, str) else json_key(item)


def facts_apply(current: Mapping[str, Any], found: Iterable[ExtractedFact]) -> dict[str, Any]:
    """The new value of each key that ``found`` changes, given the owner's ``current`` facts.

    Applied in order: "set" replaces; "add" appends an item the list lacks (a non-list value
    becomes the list's first item); "remove" drops it. A list keeps its order and its newest
    ``MAX_LIST_ITEMS`` items. Keys left as they were, and removals from a fact the owner does
    not have, are not in the result. An unknown ``op`` is logged and skipped.
    """
    values: dict[str, Any] = {}
    for fact in found:
        if fact.op not in OPS:
            logger.warning("Extracted fact %r has unknown op %r; skipped.", fact.key, fact.op)
            continue
        if fact.op == "set":
            values[fact.key] = fact.value
            continue
        base = values[fact.key] if fact.key in values else current.get(fact.key)
        if base is None and fact.op == "remove":
            continue
        items = list(base) if isinstance(base, list) else ([] if base is None else [base])
        for item in fact.value if isinstance(fact.value, list) else [fact.value]:
            same = _same_item(item)
            if fact.op == "add" and all(_same_item(old) != same for old in items):
                items.append(item)
            elif fact.op == "remove":
                items = [old for old in items if _same_item(old) != same]
        values[fact.key] = items[-MAX_LIST_ITEMS:]
    return {k: v for k, v in values.items() if k not in current or not json_equal(current[k], v)}
