"""LangGraph over the memory: ``MemoryStore()``, a ``BaseStore`` over the owners' facts, and
``MemoryCheckpointSaver(owner_id=...)``, a ``BaseCheckpointSaver`` whose threads are the owner's
sessions. Needs the extra ``langgraph``."""

from __future__ import annotations

from memory.extras import extra_install

try:
    import langgraph.checkpoint.base
    import langgraph.store.base  # noqa: F401
except ImportError as e:
    raise ImportError(
        "memory.integrations.langgraph needs langgraph, the extra langgraph: "
        + extra_install("langgraph")
    ) from e

from memory.integrations.langgraph.checkpoint import MemoryCheckpointSaver
from memory.integrations.langgraph.store import MemoryStore, fact_key, item_address

__all__ = ["MemoryCheckpointSaver", "MemoryStore", "fact_key", "item_address"]
