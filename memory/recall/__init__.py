"""Recall of what the context no longer holds: the owner's summary (``summarizer``: the built-in
offline summarizer, the LLM summarizer, and the loader of ``MEMORY["SUMMARIZER"]``). Nothing
here imports the services: ``memory.services.summaries`` runs the summarizer in a worker."""

from __future__ import annotations

from memory.recall.summarizer import LLM_SUMMARY_PROMPT, LLMSummarizer, Summarizer, summarize

__all__ = ["LLM_SUMMARY_PROMPT", "LLMSummarizer", "Summarizer", "summarize"]
