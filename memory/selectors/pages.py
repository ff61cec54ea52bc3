"""What every listing shares: the page shape, its limits, signed cursors, the owner checks."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Generic, NamedTuple, TypeVar

from django.core import signing
from django.core.exceptions import ValidationError
from django.db.models import (
    Subquery,
)
from django.utils.crypto import constant_time_compare

from memory import codec
from memory.models import Owner
from memory.validators import validate_owner_id

# Items on one page of ``session_list`` and ``fact_history``: by default, and at most.
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
# Longest cursor accepted: a 128-character session id of 4-byte characters in base64, and its
# HMAC-SHA256 signature.
MAX_CURSOR_CHARS = 1024
SIGNATURE_CHARS = 43

T = TypeVar("T")


def check_owner(owner_id: str) -> None:
    try:
        validate_owner_id(owner_id)
    except ValidationError as e:
        raise ValidationError({"user_id": e.messages}) from e


class Page(NamedTuple, Generic[T]):
    """One page of a listing and the opaque cursor of the next one (``None``: the last page)."""

    results: list[T]
    next_cursor: str | None


def _cursor_signer(scope: tuple[str, ...]) -> signing.Signer:
    """The signer of one listing's cursors: ``scope`` names the listing and whose it is."""
    return signing.Signer(salt="memory.cursor:" + json.dumps(scope))


def cursor_encode(scope: tuple[str, ...], *key: Any) -> str:
    """A cursor of the listing ``scope`` at the ordering key ``key``: the key, then its
    signature (HMAC-SHA256 with ``SECRET_KEY``), both URL-safe base64."""
    payload = base64.urlsafe_b64encode(codec.dumps(list(key))).decode("ascii").rstrip("=")
    return payload + _cursor_signer(scope).signature(payload)


def cursor_decode(cursor: str, scope: tuple[str, ...], shape: tuple[type, ...]) -> list[Any]:
    """The ordering key a cursor of ``cursor_encode`` for ``scope`` holds; ``ValidationError`` for
    anything else."""
    try:
        if not isinstance(cursor, str) or not SIGNATURE_CHARS < len(cursor) <= MAX_CURSOR_CHARS:
            raise ValueError(cursor)
        payload, signature = cursor[:-SIGNATURE_CHARS], cursor[-SIGNATURE_CHARS:]
        # NOTE: signed, so a cursor made up, changed or taken from another listing is a 400.
        signer = _cursor_signer(scope)
        if not any(
            constant_time_compare(signature, signer.signature(payload, key))
            for key in (signer.key, *signer.fallback_keys)
        ):
            raise ValueError(cursor)
        key = codec.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        if not isinstance(key, list) or len(key) != len(shape):
            raise ValueError(cursor)
        for value, kind in zip(key, shape, strict=True):
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(cursor)
            if kind is str and not isinstance(value, str):
                raise ValueError(cursor)
        return key
    except (ValueError, TypeError, binascii.Error) as e:
        raise ValidationError({"cursor": ["Invalid cursor."]}) from e


def owner_pk(owner_id: str) -> Subquery:
    # NOTE: a scalar subquery, not a join: the index's order is the query's, and LIMIT stops the
    # scan.
    return Subquery(Owner.objects.filter(external_id=owner_id).values("pk")[:1])


def check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValidationError({"limit": [f"Ensure this value is between 1 and {MAX_PAGE_SIZE}."]})
