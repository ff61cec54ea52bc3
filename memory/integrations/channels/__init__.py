"""Chat over a websocket with Django Channels: ``MemoryChatConsumer`` (or ``MemoryChatMixin`` on a
site's consumer) stores each message and its reply in the owner's memory, streams the reply, and
gives a client that reconnects, to any instance, every turn it missed once and in order
(docs/websocket.md). Needs the extra ``channels``."""

from __future__ import annotations

from memory.extras import extra_needed

with extra_needed("memory.integrations.channels", "Django Channels", "channels"):
    import channels  # noqa: F401

from memory.integrations.channels.exchanges import group_name, owner_exchange_lock, reply_chunks
from memory.integrations.channels.sockets import MemoryChatConsumer, MemoryChatMixin

__all__ = [
    "MemoryChatConsumer",
    "MemoryChatMixin",
    "group_name",
    "owner_exchange_lock",
    "reply_chunks",
]
