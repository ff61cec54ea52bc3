"""Fact extraction: what a user turn states about its author, as facts (``name``, ``likes``...).

``base`` holds the extractor protocol and its loader, ``merge`` how extracted facts merge into
an owner's current facts, ``rules`` the built-in extractor (its rules in ``english`` and
``chinese``, the checks of their values in ``values``, the text helpers all three use in
``text``), and ``llm`` an extractor for any ``complete(prompt) -> str``. Nothing here imports
the services: ``memory.services.turn_append`` runs ``MEMORY["FACT_EXTRACTOR"]`` just before
the turn's transaction and writes its facts in it, or, for a deferred extractor, the task in
``memory.services.deferred`` runs it in a worker.
"""

from __future__ import annotations

from memory.extraction.base import ExtractedFact, FactExtractor, Op
from memory.extraction.llm import LLM_PROMPT, LLMExtractor
from memory.extraction.rules import RuleBasedExtractor

__all__ = [
    "LLM_PROMPT",
    "ExtractedFact",
    "FactExtractor",
    "LLMExtractor",
    "Op",
    "RuleBasedExtractor",
]
