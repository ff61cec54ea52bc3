"""JSON encoding of cache payloads: orjson, as a django-redis serializer and as plain helpers."""

from __future__ import annotations

from typing import Any

import orjson
from django_redis.serializers.base import BaseSerializer


def dumps(value: Any) -> bytes:
    """Encode a payload; non-ASCII stays as UTF-8, as the API writes it."""
    return orjson.dumps(value)


def loads(value: bytes | str) -> Any:
    return orjson.loads(value)


class OrjsonSerializer(BaseSerializer):
    """A django-redis ``SERIALIZER`` that writes plain JSON with orjson (faster than ``json``)."""

    def dumps(self, value: Any) -> bytes:
        return orjson.dumps(value)

    def loads(self, value: bytes) -> Any:
        return orjson.loads(value)
