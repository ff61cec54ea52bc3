"""JSON of the app: orjson encoding of cache payloads (as a django-redis serializer and as
plain helpers), and the one JSON-typed equality that every comparison of stored values uses."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import orjson
from django_redis.serializers.base import BaseSerializer

# NOTE: the magnitude from which Python (and orjson) write a float in exponent form with no
# fraction digit ("1e+16"): Postgres jsonb keeps such a number as an integer, and reads it
# back as one ("10000000000000000").
_INTEGRAL_FLOAT = 1e16


def dumps(value: Any) -> bytes:
    """Encode a payload; non-ASCII stays as UTF-8, as the API writes it. Never fails on a value
    read from the database: an integer past 64 bits (stored before the validators refused the
    floats jsonb turns into one) is written as its exact digits (``wide_ints_as_fragments``)."""
    try:
        return orjson.dumps(value)
    except TypeError as e:
        if "64-bit" not in str(e):
            raise
        return orjson.dumps(wide_ints_as_fragments(value))


def wide_ints_as_fragments(value: Any) -> Any:
    """``value`` with each integer past 64 bits as an ``orjson.Fragment`` of its digits, which
    orjson writes as they are (and with everything else as it is)."""
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


# NOTE: 19 digits in a row: the shortest integer past 64 bits (-9223372036854775809) has as
# many. orjson reads such an integer as a float; json.loads, as Django's JSONField does, reads
# it as the integer (jsonb keeps a float of 1e16 or more as one: ``_INTEGRAL_FLOAT``).
_LONG_DIGITS = re.compile("[0-9]{19}")


def loads_jsonb(text: str) -> Any:
    """Decode the text of a ``jsonb`` column as Django's ``JSONField`` does (``json.loads``),
    with orjson where the two agree: everywhere but an integer past 64 bits."""
    return json.loads(text) if _LONG_DIGITS.search(text) else orjson.loads(text)


def json_key(value: Any) -> Any:
    """A form of the JSON ``value`` that is equal (``==``) for two values exactly when they
    are the same JSON value: ``true``, ``1``, ``1.0`` and ``"1"`` are four values, recursively
    through lists and objects (an object's key order does not count).

    NOTE: Python's ``==`` takes ``True == 1 == 1.0``, which made a changed fact "unchanged"
    and a different request an idempotent retry (issue 21). One exception, so that a value
    compares equal to itself once stored: a float of 1e16 or more, which Postgres jsonb keeps
    as the integer its shortest form denotes (``1e16`` is read back as ``10000000000000000``),
    is that integer here too.
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
