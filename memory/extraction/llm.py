"""An LLM-backed extractor for any ``complete(prompt) -> str``, and its prompt."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, cast

from memory.extraction.base import LIST_KEYS, OPS, STRING_KEYS, ExtractedFact, Op, logger
from memory.extraction.text import _fits

LLM_PROMPT = """\
Extract the facts that the user states about themselves in their message.

Use only these keys:
- name (string): the user's name
- preferred_name (string): what the user asks to be called
- likes (one item per fact): something the user likes
- dislikes (one item per fact): something the user dislikes
- location (string): where the user lives now
- occupation (string): the user's job
- language (string): a language the user speaks

Write nothing for questions, negations ("my name is not Bob"), hypotheticals, reported
speech, or statements about other people. A correction ("actually, call me Jim") is a new
value. Keep the user's own words and casing.

Answer with JSON only, in this shape:
{{"facts": [{{"key": "likes", "value": "basketball", "op": "add"}}]}}
op is "add" or "remove" for likes and dislikes, and "set" for the other keys.
Answer {{"facts": []}} when the message states none.

The user's current facts: {facts}
The user's message: {text}
"""


class LLMExtractor:
    """Ask a language model for the facts in a turn: ``complete(prompt) -> str`` returns JSON.

    A reply that is not JSON raises ``ValueError`` (the turn is stored without facts); entries with
    an unknown key, a bad op or a value that is not a short string are dropped. Deferred: it runs in
    a worker after commit; ``deferred=False`` runs it inside the append.
    """

    prompt = LLM_PROMPT
    keys: frozenset[str] = LIST_KEYS | STRING_KEYS
    deferred = True

    def __init__(self, complete: Callable[[str], str], *, deferred: bool = True) -> None:
        self.complete = complete
        self.deferred = deferred

    def extract(self, text: str, *, facts: Mapping[str, Any]) -> list[ExtractedFact]:
        known = {k: v for k, v in facts.items() if k in self.keys}
        prompt = self.prompt.format(
            facts=json.dumps(known, ensure_ascii=False), text=json.dumps(text, ensure_ascii=False)
        )
        return self.parse(self.complete(prompt))

    def parse(self, reply: str) -> list[ExtractedFact]:
        """The facts in a model's JSON reply (code fences allowed)."""
        body = re.sub(r"^\s*```(?:json)?\s*|\s*```\s*$", "", reply.strip())
        try:
            data = json.loads(body)
        except ValueError as e:
            raise ValueError(f"The model's reply is not JSON: {reply[:200]!r}") from e
        entries = data.get("facts", []) if isinstance(data, dict) else data
        found: list[ExtractedFact] = []
        for entry in entries if isinstance(entries, list) else []:
            fact = self._fact(entry)
            if fact is None:
                logger.warning("Dropped an extracted fact the model got wrong: %r", entry)
            elif fact not in found:
                found.append(fact)
        return found

    def _fact(self, entry: Any) -> ExtractedFact | None:
        if not isinstance(entry, dict):
            return None
        key, value = entry.get("key"), entry.get("value")
        if key not in self.keys or not isinstance(value, str):
            return None
        value = value.strip()
        if not _fits(value):
            return None
        op = entry.get("op") or ("add" if key in LIST_KEYS else "set")
        if (key in LIST_KEYS) != (op in ("add", "remove")) or op not in OPS:
            return None
        return ExtractedFact(key, value, cast(Op, op))
