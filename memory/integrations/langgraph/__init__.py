"""LangGraph over the memory: ``MemoryStore()``, a ``BaseStore`` over the owners' facts (and
``AsyncMemoryStore()``, the same refusing sync calls in an event loop), and
``MemoryCheckpointSaver(owner_id=...)``, a ``BaseCheckpointSaver`` whose threads are the owner's
sessions. Needs the extra ``langgraph``."""

from __future__ import annotations

from memory.extras import extra_needed

with extra_needed("memory.integrations.langgraph", "langgraph", "langgraph"):
    import langgraph.checkpoint.base
    import langgraph.store.base  # noqa: F401

from memory.integrations.langgraph.checkpoint import MemoryCheckpointSaver
from memory.integrations.langgraph.store import (
    AsyncMemoryStore,
    MemoryStore,
    fact_key,
    item_address,
)

__all__ = ["AsyncMemoryStore", "MemoryCheckpointSaver", "MemoryStore", "fact_key", "item_address"]
