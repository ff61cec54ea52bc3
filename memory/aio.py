"""How the async twins of the services and selectors are made: ``twin(fn)`` runs the sync
function in one thread-sensitive ``sync_to_async`` hop, so both share one implementation."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async

P = ParamSpec("P")
R = TypeVar("R")


def twin_doc(fn: Callable[..., object]) -> str:
    """The docstring of ``fn``'s twin: its own, and how the twin runs it."""
    return (
        f"{fn.__doc__ or ''}\n\n"
        f"Async twin of ``{fn.__name__}``, with the same arguments, result, errors and guarantees;"
        " it runs in Django's thread for sync code (``sync_to_async``, thread-sensitive)."
    )


def twin_of(fn: Callable[..., object]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a twin written by hand: it takes ``fn``'s docstring (``twin_doc``)."""

    def decorate(twin: Callable[P, R]) -> Callable[P, R]:
        twin.__doc__ = twin_doc(fn)
        return twin

    return decorate


def twin(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """The async twin of ``fn``, named ``a<name>``: the same call, awaited; exceptions as they are.

    NOTE: one thread-sensitive hop per operation, as Django runs sync code: a transaction, its row
    locks and its on-commit cache update stay in one thread.
    """
    hop = sync_to_async(fn, thread_sensitive=True)

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return await hop(*args, **kwargs)

    run.__name__ = f"a{fn.__name__}"
    run.__qualname__ = f"a{fn.__qualname__}"
    run.__doc__ = twin_doc(fn)
    return run
