"""Adapters of the memory for LLM frameworks, each an optional extra (``django-memory[name]``)."""
