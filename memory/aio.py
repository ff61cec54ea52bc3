"""How the async twins of the services and selectors are made: ``twin(fn)`` runs the sync
function in one thread-sensitive ``sync_to_async`` hop, so both share one implementation; a
function written as ``Steps`` runs its I/O natively async in its twin (``steps_twin``)."""

from __future__ import annotations

import functools
import inspect
import itertools
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Iterator
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from asgiref.sync import sync_to_async

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")


def twin_doc(fn: Callable[..., object]) -> str:
    """The docstring of ``fn``'s twin: its own, and how the twin runs it."""
    own = f"{fn.__doc__}\n\n" if fn.__doc__ else ""
    return (
        f"{own}Async twin of ``{fn.__name__}``, with the same arguments, result, errors and"
        " guarantees; it runs in Django's thread for sync code (``sync_to_async``,"
        " thread-sensitive)."
    )


def twin_of(fn: Callable[..., object]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a twin written by hand: it takes ``fn``'s docstring (``twin_doc``)."""

    def decorate(twin: Callable[P, R]) -> Callable[P, R]:
        twin.__doc__ = twin_doc(fn)
        return twin

    return decorate


def _named(run: Callable[..., object], fn: Callable[..., object]) -> None:
    """Name ``run`` as ``fn``'s twin, ``a<name>`` (a method's beside it in its class)."""
    run.__name__ = f"a{fn.__name__}"
    owner, dot, _ = fn.__qualname__.rpartition(".")
    run.__qualname__ = f"{owner}{dot}a{fn.__name__}"
    run.__doc__ = twin_doc(fn)


def twin(fn: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """The async twin of ``fn``, named ``a<name>``: the same call, awaited; exceptions as they are.
    One thread-sensitive hop, so a transaction and its on-commit cache update share one thread."""
    hop = sync_to_async(fn, thread_sensitive=True)

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return await hop(*args, **kwargs)

    _named(run, fn)
    return run


class Method(Generic[S, P, R]):
    """A twin made of a method, bound as a method of the class it is assigned in (the type checker
    sees it as the base class's async method it overrides)."""

    def __init__(self, fn: Callable[Concatenate[S, P], R]) -> None:
        self.fn = fn

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Callable[Concatenate[S, P], R]: ...

    @overload
    def __get__(self, obj: S, owner: type[Any]) -> Callable[P, R]: ...

    def __get__(self, obj: Any, owner: type[Any]) -> Any:
        return self.fn if obj is None else types.MethodType(self.fn, obj)


def twin_method(fn: Callable[Concatenate[S, P], R]) -> Method[S, P, Coroutine[Any, Any, R]]:
    """``twin`` of a method, as a method."""
    return Method(twin(fn))


def twin_iter_method(
    fn: Callable[Concatenate[S, P], Iterator[T]], *, batch: int
) -> Method[S, P, AsyncIterator[T]]:
    """The async twin of an iterating method, as a method: its items, ``batch`` of them per
    thread-sensitive hop (the sync iterator runs only in Django's thread for sync code)."""

    @functools.wraps(fn)
    async def run(obj: S, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        items: Iterator[T] | None = None

        def take() -> list[T]:
            nonlocal items
            if items is None:
                items = iter(fn(obj, *args, **kwargs))
            return list(itertools.islice(items, batch))

        hop = sync_to_async(take, thread_sensitive=True)
        while chunk := await hop():
            for item in chunk:
                yield item
            if len(chunk) < batch:
                return

    _named(run, fn)
    return Method(run)


@dataclass(frozen=True)
class Step(Generic[R]):
    """One I/O step of a function written once for both doors: ``run()``, or ``await arun()``."""

    run: Callable[[], R]
    arun: Callable[[], Awaitable[R]]


# A function's code between its I/O steps: it yields each ``Step`` and is sent its result.
Steps = Generator[Step[Any], Any, R]


def steps_run(steps: Steps[R]) -> R:
    """The result of ``steps``, each step run in this thread; what a step raises propagates."""
    try:
        step = next(steps)
        while True:
            step = steps.send(step.run())
    except StopIteration as done:
        result: R = done.value
        return result


def steps_twin(
    fn: Callable[P, R], steps: Callable[..., Steps[R]]
) -> Callable[P, Coroutine[Any, Any, R]]:
    """The async twin of ``fn``, named ``a<name>``: ``steps`` called with ``fn``'s arguments in
    their order (its defaults applied), each step's I/O awaited."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        running = steps(*bound.arguments.values())
        try:
            step = next(running)
            while True:
                step = running.send(await step.arun())
        except StopIteration as done:
            result: R = done.value
        return result

    _named(run, fn)
    return run
