"""What bounds the chat page's anonymous memory: throttles on visitors' messages (per session, per
address, new anonymous memories per address), caps on what one anonymous owner holds, and the
retention sweep's enqueue. An anonymous owner (``anon-`` and 32 hex digits) is named only by its
visitor's Django session."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from rest_framework.throttling import SimpleRateThrottle

from memory import ops
from memory.throttling import AnonRateThrottle, WindowThrottle

logger = logging.getLogger(__name__)

# The visitor's anonymous owner id, kept in their Django session (server side: only the
# session cookie names it, and nobody else can pick it on this page).
ANON_SESSION_KEY = "memoryproj_anon_owner_id"
# Seconds between two enqueues of the retention sweep by one process.
SWEEP_EVERY = 3600.0


def session_anon_id(request: HttpRequest) -> str | None:
    """The anonymous owner id this browser session holds, if it has one yet."""
    owner_id = request.session.get(ANON_SESSION_KEY)
    return owner_id if isinstance(owner_id, str) else None


class SessionThrottle(WindowThrottle, SimpleRateThrottle):
    """Messages of one anonymous visitor's session (rate ``chat_session``); a session's first
    message has no anonymous memory yet and is counted by its address only."""

    scope = "chat_session"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        owner_id = session_anon_id(request)
        if request.user.is_authenticated or owner_id is None:
            return None
        return self.cache_format % {"scope": self.scope, "ident": owner_id}


class AddressThrottle(AnonRateThrottle):
    """Messages of anonymous visitors from one client address (rate ``chat_address``): DRF's
    ``get_ident``, the peer's address unless ``NUM_PROXIES`` (``DJANGO_NUM_PROXIES``) says
    that many proxies in front append to ``X-Forwarded-For``."""

    scope = "chat_address"


class NewMemoryThrottle(AnonRateThrottle):
    """Anonymous memories started from one client address (rate ``chat_new``): the first
    messages of sessions that have none."""

    scope = "chat_new"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        if session_anon_id(request) is not None:
            return None
        return super().get_cache_key(request, view)  # type: ignore[no-any-return]


THROTTLES = (SessionThrottle, AddressThrottle, NewMemoryThrottle)


def throttle_wait(request: HttpRequest) -> int | None:
    """Whole seconds an anonymous visitor's message must wait, the longest of the throttles that
    refuse it; ``None`` when they all let it through (and counted it). A logged-in visitor is
    not throttled here (the API's user throttle is theirs)."""
    if request.user.is_authenticated:
        return None
    waits = []
    for throttle_class in THROTTLES:
        throttle = throttle_class()
        if not throttle.allow_request(request, None):
            waits.append(throttle.wait() or 1.0)
    return max(1, math.ceil(max(waits))) if waits else None


def room_refusal(*, owner_id: str, message: str) -> str | None:
    """Why the anonymous owner cannot take one more exchange (past ``MEMORYPROJ_ANON_MAX_TURNS``
    turns or ``MEMORYPROJ_ANON_MAX_CHARS`` characters); ``None`` when it can. One query over its
    turns.

    NOTE: checked outside the owner's lock: messages in flight may each pass it, so an owner may
    end a few turns over (the session throttle bounds how many).
    """
    usage = ops.owner_usage_get(owner_id=owner_id)
    most_turns, most_chars = settings.MEMORYPROJ_ANON_MAX_TURNS, settings.MEMORYPROJ_ANON_MAX_CHARS
    if usage.turns + 2 <= most_turns and usage.chars + len(message) <= most_chars:
        return None
    return (
        f"This anonymous conversation is full (at most {most_turns:,} turns and "
        f"{most_chars:,} characters). Log in to keep talking: what you said so far comes with you."
    )


_swept_at: float | None = None
_sweep_lock = threading.Lock()


def sweep_due() -> None:
    """Enqueue the retention sweep (``memoryproj.tasks.anon_sweep``, for the worker) unless this
    process did within ``SWEEP_EVERY`` seconds; called when a visitor starts an anonymous
    memory. Never raises: a backend that fails is logged, and the next hour tries again."""
    global _swept_at
    now = time.monotonic()
    with _sweep_lock:
        if _swept_at is not None and now - _swept_at < SWEEP_EVERY:
            return
        _swept_at = now
    try:
        from memoryproj.tasks import anon_sweep

        anon_sweep.enqueue()
    except Exception:
        logger.exception("The sweep of idle anonymous memories could not be enqueued")
