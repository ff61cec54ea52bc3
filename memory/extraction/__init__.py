"""Fact extraction: what a user turn states about its author, as facts (``name``, ``likes``...).

``base`` holds the extractor protocol and loader, ``merge`` how facts merge, ``rules`` the built-in
extractor (with ``english``, ``chinese``, ``values`` and ``text``), ``llm`` an extractor for any
``complete(prompt) -> str``. Nothing here imports the services.
"""

from __future__ import annotations

from memory.extraction.base import (
    LIST_KEYS,
    MAX_LIST_ITEMS,
    MAX_VALUE_CHARS,
    OPS,
    STRING_KEYS,
    ExtractedFact,
    FactExtractor,
    LazyFacts,
    Op,
    extractor_deferred,
    extractor_get,
    logger,
)
from memory.extraction.llm import LLM_PROMPT, LLMExtractor
from memory.extraction.merge import facts_apply
from memory.extraction.rules import RuleBasedExtractor

__all__ = [
    "LIST_KEYS",
    "LLM_PROMPT",
    "MAX_LIST_ITEMS",
    "MAX_VALUE_CHARS",
    "OPS",
    "STRING_KEYS",
    "ExtractedFact",
    "FactExtractor",
    "LLMExtractor",
    "LazyFacts",
    "Op",
    "RuleBasedExtractor",
    "extractor_deferred",
    "extractor_get",
    "facts_apply",
    "logger",
]
