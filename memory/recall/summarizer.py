"""Summarizers for ``MEMORY["SUMMARIZER"]``: the built-in one (extractive, offline, English and
Chinese, deterministic), one for any ``complete(prompt) -> str``, and the setting's loader."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import NamedTuple

from memory.conf import callable_import, conf
from memory.extraction.base import STRING_KEYS
from memory.extraction.rules import RuleBasedExtractor
from memory.payloads import TurnPayload

# ``(previous_summary, turns) -> text``: the summary of ``previous_summary`` and then ``turns``.
Summarizer = Callable[[str | None, Sequence[TurnPayload]], str]

# The longest summary the built-in summarizer writes, and the most lines (sentences) it keeps.
MAX_SUMMARY_CHARS = 2000
MAX_SUMMARY_LINES = 40
# A sentence longer than this is cut (pasted text is not a statement).
MAX_SENTENCE_CHARS = 240

# Sentence ends: English punctuation followed by a space, Chinese punctuation, line breaks.
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n+")
_FIRST_PERSON_EN = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|im|my|me|mine|myself|we|our|us)\b", re.I)
_QUESTION = re.compile(r"[?？]\s*$|[吗呢嘛][。！!.]?\s*$")
_LINE_PREFIX = re.compile(r"^\s*(?:[-*•]\s+)?")
_extractor = RuleBasedExtractor()


class _Sentence(NamedTuple):
    text: str
    position: int
    priority: int
    fact_key: str | None


def _sentences(text: str) -> list[str]:
    pieces = (piece.strip() for piece in _SENTENCE_END.split(text))
    return [piece for piece in pieces if piece]


def _normal(text: str) -> str:
    """What two sentences that say the same share: case, spacing and punctuation aside."""
    kept = (c for c in unicodedata.normalize("NFKC", text).casefold() if c.isalnum())
    return "".join(kept)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SENTENCE_CHARS else text[: MAX_SENTENCE_CHARS - 1] + "…"


def _scored(text: str, position: int) -> _Sentence | None:
    """A sentence with how much it matters: 4 a one-value fact (a name, a city), 3 a list fact (a
    like), 2 another statement about the user; ``None`` for a question, a fragment, or one not about
    the user."""
    if len(_normal(text)) < 3 or _QUESTION.search(text):
        return None
    facts = _extractor.extract(text)
    if facts:
        key = next((fact.key for fact in facts if fact.key in STRING_KEYS), None)
        return _Sentence(_cut(text), position, 4 if key else 3, key)
    if "我" in text or _FIRST_PERSON_EN.search(text):
        return _Sentence(_cut(text), position, 2, None)
    return None


def summarize(previous_summary: str | None, turns: Sequence[TurnPayload]) -> str:
    """The built-in summarizer: the user's own sentences that state something about them.

    Extractive, deterministic, offline, English and Chinese: facts the built-in extractor reads
    first, then other statements about the user; questions, assistant turns and small talk go, and a
    later one-value fact outranks the earlier. At most ``MAX_SUMMARY_LINES`` lines and
    ``MAX_SUMMARY_CHARS`` characters, in the order said, one ``- sentence`` a line.
    """
    candidates: list[_Sentence] = []
    position = 0
    lines = (_LINE_PREFIX.sub("", line) for line in (previous_summary or "").splitlines())
    texts = [line.strip() for line in lines if line.strip()]
    for turn in turns:
        if turn["role"] == "user":
            texts += _sentences(turn["content"])
    seen: dict[str, int] = {}
    for text in texts:
        sentence = _scored(text, position)
        position += 1
        if sentence is None:
            continue
        key = _normal(sentence.text)
        if key in seen:
            # Said again: it counts from its latest saying.
            candidates[seen[key]] = candidates[seen[key]]._replace(position=sentence.position)
            continue
        seen[key] = len(candidates)
        candidates.append(sentence)
    newest_of: dict[str, int] = {}
    for sentence in candidates:
        if sentence.fact_key is not None:
            newest_of[sentence.fact_key] = max(
                newest_of.get(sentence.fact_key, -1), sentence.position
            )
    ranked = sorted(
        (
            s._replace(priority=1)
            if s.fact_key is not None and newest_of[s.fact_key] != s.position
            else s
            for s in candidates
        ),
        key=lambda s: (-s.priority, -s.position),
    )
    kept: list[_Sentence] = []
    used = 0
    for sentence in ranked:
        cost = len(sentence.text) + 3
        if len(kept) == MAX_SUMMARY_LINES or used + cost > MAX_SUMMARY_CHARS:
            continue
        kept.append(sentence)
        used += cost
    kept.sort(key=lambda s: s.position)
    return "\n".join(f"- {s.text}" for s in kept)


LLM_SUMMARY_PROMPT = """\
Update the summary of a conversation between a user and an assistant.

Keep every fact the user states about themselves (their name, where they live, their work,
family, pets, likes and dislikes, plans) in the user's own words and language, and the
decisions and open questions of the conversation. Drop small talk. A later statement of a fact
replaces an earlier one. Answer with the new summary only, in plain text, at most {max_chars}
characters.

The summary so far:
{previous}

The conversation since, oldest first:
{turns}
"""


class LLMSummarizer:
    """Ask a language model for the summary: ``complete(prompt) -> str`` (any callable, with its own
    timeout), run in the refresh's worker, never under a lock. An empty reply raises ``ValueError``
    (the refresh stays due); a reply past ``max_chars`` is cut."""

    prompt = LLM_SUMMARY_PROMPT

    def __init__(self, complete: Callable[[str], str], *, max_chars: int = 4000) -> None:
        self.complete = complete
        self.max_chars = max_chars

    def __call__(self, previous_summary: str | None, turns: Sequence[TurnPayload]) -> str:
        lines = "\n".join(f"{turn['role']}: {turn['content']}" for turn in turns)
        prompt = self.prompt.format(
            max_chars=self.max_chars, previous=previous_summary or "(none yet)", turns=lines
        )
        reply = self.complete(prompt).strip()
        if not reply:
            raise ValueError("The model's summary is empty.")
        return reply[: self.max_chars]


@functools.lru_cache(maxsize=8)
def _summarizer_import(path: str) -> Summarizer:
    return callable_import("SUMMARIZER", path)  # type: ignore[no-any-return]


def summarizer_get() -> Summarizer | None:
    """The callable ``MEMORY["SUMMARIZER"]`` names (read on each call), or ``None`` when off. Raises
    ``ImproperlyConfigured``, naming the setting, when it cannot be imported or called
    (``memory.E024``)."""
    path = conf.SUMMARIZER
    return None if path is None else _summarizer_import(path)
