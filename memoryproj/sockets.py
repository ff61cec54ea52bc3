"""The demo chat over a websocket (``ws/chat/``, served under ASGI): the memory's
``MemoryChatConsumer`` with the chat page's owner (a logged-in user, or the anonymous visitor
of the browser session), its throttles and caps, and its responder."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from memory.integrations.channels import MemoryChatConsumer
from memoryproj import anonymous
from memoryproj.anonymous import ANON_SESSION_KEY
from memoryproj.responders import responder_get


class ChatConsumer(MemoryChatConsumer):
    """``ws/chat/``: the owner is the logged-in user, else the anonymous owner the visitor's
    session holds (made by the page's first message, ``chat/session/``); a visitor with
    neither is closed with 4401. Messages pass the API's throttles and, for an anonymous
    visitor, the chat page's (``memoryproj.anonymous``) and its caps."""

    async def connect(self) -> None:
        self.responder = responder_get()
        await super().connect()

    async def owner_resolve(self, scope: dict[str, Any]) -> str | None:
        user = scope.get("user")
        if user is not None and user.is_authenticated:
            return await super().owner_resolve(scope)
        session = scope.get("session")
        if session is None:
            return None
        owner_id = await sync_to_async(session.get, thread_sensitive=False)(ANON_SESSION_KEY)
        return owner_id if isinstance(owner_id, str) else None

    def throttles(self) -> list[Any]:
        user = self.scope.get("user")
        if user is not None and user.is_authenticated:
            return super().throttles()
        return [*super().throttles(), *(cls() for cls in anonymous.THROTTLES)]

    async def message_refusal(self, *, owner_id: str, content: str) -> str | None:
        user = self.scope.get("user")
        if user is not None and user.is_authenticated:
            return None
        return await sync_to_async(anonymous.room_refusal, thread_sensitive=False)(
            owner_id=owner_id, message=content
        )
