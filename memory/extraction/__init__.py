"""Fact extraction: what a user turn states about its author, as facts (``name``, ``likes``...).

``base`` holds the extractor protocol and loader, ``merge`` how facts merge, ``rules`` the built-in
extractor (with ``english``, ``chinese``, ``values`` and ``text``), ``llm`` an extractor for any
``complete(prompt) -> str``. Nothing here imports the services.
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
