"""The extractor protocol: the fact an extractor yields, the interface it implements, and the
loader of ``MEMORY["FACT_EXTRACTOR"]``."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from django.core.exceptions import ImproperlyConfigured

from memory.conf import conf, setting_import

logger = logging.getLogger("memory.extraction")

Op = Literal["set", "add", "remove"]
OPS: frozenset[str] = frozenset({"set", "add", "remove"})
# The keys the built-in extractors write (the contract's table); list keys take "add"/"remove".
LIST_KEYS: frozenset[str] = frozenset({"likes", "dislikes"})
STRING_KEYS: frozenset[str] = frozenset(
    {"name", "preferred_name", "location", "occupation", "language"}
)
# A list fact keeps its newest items, at most this many.
MAX_LIST_ITEMS = 50
# Longest value (or list item) the built-in extractors write, in characters.
MAX_VALUE_CHARS = 80


@dataclass(frozen=True)
class ExtractedFact:
    """One fact a turn states about its author.

    ``op`` "set" replaces the value of ``key``; "add" and "remove" add one item to, or remove
    one from, a list fact (``value`` is the item; items compare case-insensitively).
    """

    key: str
    value: Any
    op: Op = "set"


class FactExtractor(Protocol):
    """What ``MEMORY["FACT_EXTRACTOR"]`` names: such a class, a factory of one, or an instance.

    One instance per dotted path, shared by every thread: it holds no per-turn state. *Inline* (the
    default) runs in the request before the turn's transaction, holding no lock; with a true
    ``deferred`` attribute it runs after commit in a django-tasks worker.
    """

    def extract(self, text: str, *, facts: Mapping[str, Any]) -> Iterable[ExtractedFact]:
        """The facts ``text``, a user turn, states about its author.

        ``facts`` are the owner's current facts, read only if the extractor looks. Any exception is
        logged and the turn is stored without facts.
        """
        ...


def extractor_get() -> FactExtractor | None:
    """The configured extractor, or ``None`` when ``MEMORY["FACT_EXTRACTOR"]`` is ``None``.

    Raises ``ImproperlyConfigured``, naming the setting, when the path cannot be imported.
    """
    path = conf.FACT_EXTRACTOR
    if path is None:
        return None
    if not isinstance(path, str):
        raise ImproperlyConfigured(f"MEMORY['FACT_EXTRACTOR'] must be a dotted path, not {path!r}.")
    return extractor_load(path)


def extractor_deferred(extractor: FactExtractor) -> bool:
    """Whether ``extractor`` runs after commit, in a worker, not in the turn's transaction."""
    return bool(getattr(extractor, "deferred", False))


@functools.lru_cache(maxsize=16)
def extractor_load(path: str) -> FactExtractor:
    target = setting_import("FACT_EXTRACTOR", path)
    if isinstance(target, type) or not hasattr(target, "extract"):
        target = target()
    return target  # type: ignore[no-any-return]


class LazyFacts(Mapping[str, Any]):
    """An owner's current facts ({key: value}), loaded on first access."""

    def __init__(self, load: Callable[[], Mapping[str, Any]]) -> None:
        self._load = load
        self._facts: Mapping[str, Any] | None = None

    @property
    def loaded(self) -> bool:
        """Whether the facts were read (an extractor looked at them)."""
        return self._facts is not None

    def _get(self) -> Mapping[str, Any]:
        if self._facts is None:
            self._facts = dict(self._load())
        return self._facts

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())
