"""The demo chat's assistant: the ``Responder`` interface a site replaces with its LLM call, and
the deterministic default that answers from the memory alone (``MEMORYPROJ_RESPONDER``)."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator
from typing import Any, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from memory.payloads import ContextPayload

DEFAULT_RESPONDER = "memoryproj.responders.DeterministicResponder"

NAME_QUESTION_RE = re.compile(
    r"\b(?:what(?:'|’)?s|what\s+is)\s+my\s+name\b|\bwho\s+am\s+i\b|我叫什么|我是谁",
    re.IGNORECASE,
)


class Responder(Protocol):
    """What ``MEMORYPROJ_RESPONDER`` names: such a class, a factory of one, or an instance.

    One instance is made per dotted path and shared by every request thread, so it holds no
    per-conversation state: everything it knows comes in ``context``.
    """

    def respond(self, *, context: ContextPayload, message: str) -> str:
        """The assistant's reply to ``message``, the user turn just stored.

        ``context`` is ``memory.selectors.context_get`` read after that turn was stored: the
        owner's facts (extracted from this turn too) and last turns, ending with ``message``.
        An LLM-backed responder puts both in its prompt; an exception is the page's 500.
        """
        ...


class StreamingResponder(Responder, Protocol):
    """A responder that can also produce its reply piece by piece, as an LLM streams tokens;
    the page's streamed reply (``/chat/stream/``) uses ``astream`` when a responder has it."""

    def astream(self, *, context: ContextPayload, message: str) -> AsyncIterator[str]:
        """The reply to ``message`` in chunks whose concatenation is the whole reply."""
        ...


def responder_get() -> Responder:
    """The configured responder; ``ImproperlyConfigured``, naming the setting, when the
    dotted path in ``MEMORYPROJ_RESPONDER`` cannot be imported."""
    path = getattr(settings, "MEMORYPROJ_RESPONDER", DEFAULT_RESPONDER)
    if not isinstance(path, str):
        raise ImproperlyConfigured(f"MEMORYPROJ_RESPONDER must be a dotted path, not {path!r}.")
    return _responder_load(path)


@functools.lru_cache(maxsize=8)
def _responder_load(path: str) -> Responder:
    try:
        target: Any = import_string(path)
    except ImportError as e:
        raise ImproperlyConfigured(f"MEMORYPROJ_RESPONDER {path!r} cannot be imported: {e}") from e
    if isinstance(target, type) or not hasattr(target, "respond"):
        target = target()
    return target  # type: ignore[no-any-return]


def _likes(facts: dict[str, Any]) -> list[str]:
    likes = facts.get("likes")
    if isinstance(likes, str):
        return [likes]
    if isinstance(likes, list):
        return [str(item) for item in likes if item]
    return []


class DeterministicResponder:
    """Replies from the facts alone, the same words for the same memory: it greets the user by
    ``preferred_name`` or ``name``, mentions their latest like, answers "What's my name?", and
    says what it does not know yet. ``astream`` yields the same reply word by word, ``delay``
    seconds apart, as a model producing tokens would."""

    delay = 0.04

    async def astream(self, *, context: ContextPayload, message: str) -> AsyncIterator[str]:
        for i, word in enumerate(
            re.findall(r"\S+\s*", self.respond(context=context, message=message))
        ):
            if i:
                await asyncio.sleep(self.delay)
            yield word

    def respond(self, *, context: ContextPayload, message: str) -> str:
        facts = context["facts"]
        name = facts.get("preferred_name") or facts.get("name")
        name = str(name) if name else None
        if NAME_QUESTION_RE.search(message):
            if name is None:
                return 'I don\'t know your name yet. Tell me: "My name is ...".'
            return f"Your name is {name}."
        if name is None:
            return (
                "Hello! I don't know your name yet. Tell me about yourself, for example: "
                '"My name is ..., I like ...".'
            )
        # NOTE: the context ends with ``message`` itself; any turn before it means the user
        # has talked to us before (in this session or another).
        met_before = len(context["turns"]) > 1
        parts = [f"Hello again, {name}!" if met_before else f"Nice to meet you, {name}!"]
        likes = _likes(facts)
        if likes:
            like = likes[-1]
            if like.casefold() in message.casefold():
                parts.append(f"I'll remember that you like {like}.")
            else:
                parts.append(f"Any news on {like}?")
        else:
            parts.append("What do you like to do?")
        return " ".join(parts)
