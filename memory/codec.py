"""JSON of the app: orjson encoding of cache payloads (as a django-redis serializer and as
plain helpers), and the one JSON-typed equality that every comparison of stored values uses."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import orjson
from django_redis.serializers.base import BaseSerializer

# NOTE: from this magnitude floats are written as "1e+16", which jsonb keeps as an integer.
_INTEGRAL_FLOAT = 1e16


def dumps(value: Any) -> bytes:
    """Encode a payload as UTF-8 JSON, as the API writes it. Never fails on a value read from the
    database: an integer past 64 bits is written as its exact digits."""
    try:
        return orjson.dumps(value)
    except TypeError as e:
        if "64-bit" not in str(e):
            raise
        return orjson.dumps(wide_ints_as_fragments(value))


def dumps_all(values: list[Any]) -> list[bytes]:
    """Each of ``values`` encoded as ``dumps`` encodes it, in one pass (a cached copy's
    payloads)."""
    try:
        return [orjson.dumps(value) for value in values]
    except TypeError:
        return [dumps(value) for value in values]


def wide_ints_as_fragments(value: Any) -> Any:
    """``value`` with each integer past 64 bits as an ``orjson.Fragment`` of its digits."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**64:
            return orjson.Fragment(str(value).encode())
        return value
    if isinstance(value, dict):
        return {key: wide_ints_as_fragments(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [wide_ints_as_fragments(item) for item in value]
    return value


def loads(value: bytes | str) -> Any:
    return orjson.loads(value)


# NOTE: 19 digits in a row, as in the shortest integer past 64 bits: orjson would read it as a
# float, json.loads (and Django's JSONField) as the integer.
_LONG_DIGITS = re.compile("[0-9]{19}")


def loads_jsonb(text: str) -> Any:
    """Decode a ``jsonb`` column's text as Django's ``JSONField`` does, with orjson where the two
    agree (everywhere but an integer past 64 bits)."""
    return json.loads(text) if _LONG_DIGITS.search(text) else orjson.loads(text)


# orjson reads an integer past 64 bits as a float of at least this magnitude (or fails on one
# past a double); no other number it reads differs from json.loads's.
_WIDE = float(2**63)


def _wide(value: Any) -> bool:
    """Whether a value orjson decoded holds a float that may have been a wider integer."""
    if isinstance(value, float):
        return not abs(value) < _WIDE
    if isinstance(value, dict):
        return any(_wide(item) for item in value.values())
    if isinstance(value, list):
        return any(_wide(item) for item in value)
    return False


def loads_jsonb_rows(text: str, column: int) -> list[list[Any]]:
    """A JSON array of rows (arrays) whose ``column`` holds a ``jsonb`` value, each decoded as
    ``loads_jsonb`` decodes it: with orjson in one pass, or, where a value holds a number orjson
    may have read otherwise, the whole with ``json.loads``."""
    try:
        rows: list[list[Any]] = orjson.loads(text)
    except orjson.JSONDecodeError:
        return list(json.loads(text))
    for row in rows:
        if row[column] and _wide(row[column]):
            return list(json.loads(text))
    return rows


def json_key(value: Any) -> Any:
    """A form of the JSON ``value`` equal (``==``) for two values exactly when they are the same
    JSON value: ``true``, ``1``, ``1.0`` and ``"1"`` are four; an object's key order does not
    count. Exception: a float of 1e16 or more is the integer jsonb stores it as.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        if abs(value) >= _INTEGRAL_FLOAT and value == value and abs(value) != float("inf"):
            return ("int", int(Decimal(repr(value))))
        return ("float", value)
    if isinstance(value, dict):
        return ("object", {key: json_key(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return ("array", tuple(json_key(item) for item in value))
    return ("other", value)


def json_equal(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are the same JSON value (``json_key``), not merely ``==``."""
    return bool(json_key(a) == json_key(b))


class OrjsonSerializer(BaseSerializer):  # type: ignore[misc]  # django-redis has no types
    """A django-redis ``SERIALIZER`` that writes plain JSON with orjson (faster than ``json``)."""

    def dumps(self, value: Any) -> bytes:
        return dumps(value)

    def loads(self, value: bytes) -> Any:
        return orjson.loads(value)
