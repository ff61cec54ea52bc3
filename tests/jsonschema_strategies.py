"""Hypothesis strategies of JSON values from a JSON Schema: hypothesis-jsonschema's ``from_schema``,
on the Hypothesis this suite pins.

NOTE: hypothesis-jsonschema 0.23.1 (its latest) draws an object's properties with Hypothesis's
internal ``many(...).more()``, which Hypothesis has since made a ``with many(...) as elements:
for _ in elements:`` loop; ``_Many`` gives that loop the old two methods, for its one caller.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis.internal.conjecture import utils as cu
from hypothesis_jsonschema import _from_schema, from_schema

__all__ = ["from_schema"]


class _Many:
    """``many(data, min_size, max_size, average_size)`` with ``more()`` and ``reject()``."""

    def __init__(self, data: Any, **sizes: Any) -> None:
        self._many = cu.many(data, **sizes)
        self._many.__enter__()
        self._elements = iter(self._many)

    def more(self) -> bool:
        try:
            next(self._elements)
        except StopIteration:
            self._many.__exit__(None, None, None)
            return False
        return True

    def reject(self) -> None:
        self._many.reject()


if not hasattr(cu.many, "more"):
    _from_schema.cu = SimpleNamespace(many=_Many)  # type: ignore[attr-defined]
