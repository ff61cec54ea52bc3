"""Input rules of the contract (owner ids, fact keys, session ids, turn content, JSON values),
shared by the services (the Python API) and the DRF serializers (the HTTP API)."""

from __future__ import annotations

import datetime as dt
import math
import re
from decimal import Decimal
from typing import Any

import orjson
from django.core.exceptions import ValidationError

from memory.conf import conf

OWNER_ID_RE = re.compile(r"^[A-Za-z0-9_\-.@:]{1,128}$")
# NOTE: not only dots: "." and ".." are URL dot segments, which clients collapse (a delete of the
# fact "../" would delete the user).
FACT_KEY_RE = re.compile(r"^(?!\.+$)[a-z0-9_\-.]{1,64}$")
# A key a fact may already hold (before dots alone were refused): found by memory.W010, renamed by
# ``manage.py memory_fact_keys --rename``.
HELD_FACT_KEY_RE = re.compile(r"^[a-z0-9_\-.]{1,64}$")
IDEMPOTENCY_KEY_RE = re.compile(r"^[\x20-\x7e]{1,128}$")
# NOTE: control characters (NUL above all: Postgres rejects it in text) have no place in a label.
SESSION_ID_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,128}$")
# NOTE: a lone surrogate cannot be stored as UTF-8; kept out of the patterns above, which the
# OpenAPI schema publishes.
SURROGATE_RE = re.compile(r"[\ud800-\udfff]")


def has_surrogate(value: str) -> bool:
    """Whether ``value`` holds a lone surrogate; ASCII text (a flag of the string) is not
    scanned."""
    return not value.isascii() and SURROGATE_RE.search(value) is not None


MAX_JSON_DEPTH = 32
# Integers a JSON value may hold: signed 64 bits, which orjson (the cache's codec) writes.
MIN_JSON_INT = -(2**63)
MAX_JSON_INT = 2**63 - 1
# NOTE: from this magnitude floats are written as "1e+16", which jsonb keeps as an integer.
INTEGRAL_FLOAT = 1e16
NUMBER_RULE = (
    "Numbers must read back unchanged: integers within -9223372036854775808..9223372036854775807, "
    "and finite floats below 1e16 in magnitude, or at or above it only when the integer they "
    "denote is exactly theirs and within that range."
)


def validate_owner_id(value: str) -> None:
    """An owner id is 1-128 characters of letters, digits and ``_ - . @ :``."""
    if not isinstance(value, str) or not OWNER_ID_RE.fullmatch(value):
        raise ValidationError(
            "Enter 1-128 characters of letters, digits and _ - . @ :", code="invalid_owner_id"
        )


def validate_fact_key(value: str) -> None:
    """A fact key is 1-64 characters of lower-case letters, digits and ``_ - .``, not made
    only of dots."""
    if not isinstance(value, str) or not HELD_FACT_KEY_RE.fullmatch(value):
        raise ValidationError(
            "Enter 1-64 characters of lower-case letters, digits and _ - .", code="invalid_key"
        )
    if not FACT_KEY_RE.fullmatch(value):
        raise ValidationError(
            "A key may not be made only of dots (. and .. are URL dot segments).",
            code="dot_key",
        )


def validate_held_fact_key(value: str) -> None:
    """A key a fact may already hold, to read or delete it: ``validate_fact_key``'s rule, but
    keys made only of dots (written before that rule) pass."""
    if not isinstance(value, str) or not HELD_FACT_KEY_RE.fullmatch(value):
        raise ValidationError(
            "Enter 1-64 characters of lower-case letters, digits and _ - .", code="invalid_key"
        )


def dots_only(value: str) -> bool:
    """Whether ``value`` is a key made only of dots (1-64 of them)."""
    return 1 <= len(value) <= 64 and value == "." * len(value)


def validate_session_id(value: str) -> None:
    """A session id is 1-128 characters with no control characters or lone surrogates."""
    if not isinstance(value, str) or not SESSION_ID_RE.fullmatch(value) or has_surrogate(value):
        raise ValidationError(
            "Enter 1-128 characters with no control characters.", code="invalid_session_id"
        )


def validate_idempotency_key(value: str) -> None:
    """An idempotency key is 1-128 printable ASCII characters."""
    if not isinstance(value, str) or not IDEMPOTENCY_KEY_RE.fullmatch(value):
        raise ValidationError(
            "Enter 1-128 printable ASCII characters.", code="invalid_idempotency_key"
        )


def validate_content(value: str) -> None:
    """Turn content is text of at most ``MEMORY["MAX_TURN_CHARS"]`` characters with no NUL and
    no lone surrogate (neither can be stored as UTF-8 text)."""
    if not isinstance(value, str):
        raise ValidationError("Content must be a string.", code="invalid")
    limit = conf.MAX_TURN_CHARS
    if len(value) > limit:
        raise ValidationError(
            f"Ensure this field has no more than {limit} characters.", code="max_length"
        )
    if "\x00" in value:
        raise ValidationError(
            "Null characters are not allowed.", code="null_characters_not_allowed"
        )
    if has_surrogate(value):
        raise ValidationError(
            "Surrogate characters are not allowed.", code="surrogate_characters_not_allowed"
        )


def _json_walk(value: Any, depth: int) -> None:
    if depth > MAX_JSON_DEPTH:
        raise ValidationError(f"Nested deeper than {MAX_JSON_DEPTH} levels.", code="too_deep")
    if isinstance(value, str):
        if "\x00" in value:
            raise ValidationError(
                "Null characters are not allowed.", code="null_characters_not_allowed"
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError("Object keys must be strings.", code="invalid")
            _json_walk(key, depth + 1)
            _json_walk(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _json_walk(item, depth + 1)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError("NaN and infinity are not JSON.", code="invalid")
        if not number_round_trips(value):
            raise ValidationError(NUMBER_RULE, code="number_out_of_range")
    elif isinstance(value, int) and not isinstance(value, bool):
        if not number_round_trips(value):
            raise ValidationError(NUMBER_RULE, code="number_out_of_range")
    elif value is not None and not isinstance(value, bool):
        raise ValidationError("Not a JSON value.", code="invalid")


def number_round_trips(value: int | float) -> bool:
    """Whether the JSON number ``value`` reads back as the same number from ``jsonb`` and the
    cache's codec: a signed 64-bit integer, a finite float below ``INTEGRAL_FLOAT``, or a larger
    float only if it is exactly the 64-bit integer jsonb turns it into."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return False
        if abs(value) < INTEGRAL_FLOAT:
            return True
        stored = int(Decimal(repr(value)))
        return stored == value and MIN_JSON_INT <= stored <= MAX_JSON_INT
    return MIN_JSON_INT <= value <= MAX_JSON_INT


def validate_json_value(value: Any) -> None:
    """Any JSON value that Postgres ``jsonb`` stores and gives back unchanged: no NUL in
    strings, numbers that round-trip (``number_round_trips``), bounded depth and size."""
    _json_walk(value, 0)
    try:
        size = len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError) as e:
        raise ValidationError("Not a JSON value.", code="invalid") from e
    if size > conf.MAX_JSON_BYTES:
        raise ValidationError(
            f"Ensure this value is at most {conf.MAX_JSON_BYTES} bytes of JSON.", code="too_large"
        )


def validate_metadata(value: Any) -> None:
    """Turn metadata is a JSON object (see ``validate_json_value``)."""
    if not isinstance(value, dict):
        raise ValidationError("Metadata must be a JSON object.", code="invalid")
    validate_json_value(value)


# Longest ``actor`` recorded (``"api:"`` and a 150-character username fit; longer is cut).
MAX_ACTOR_CHARS = 200
ACTOR_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")


def validate_actor(value: str) -> None:
    """An actor is 1-200 characters without control characters."""
    if not isinstance(value, str) or not ACTOR_RE.fullmatch(value) or has_surrogate(value):
        raise ValidationError(
            "Enter 1-200 characters without control characters.", code="invalid_actor"
        )


def actor_of(door: str, username: str) -> str:
    """The actor of a change made through ``door`` (``"api"``, ``"admin"``) by ``username``."""
    clean = "".join(c for c in username if c.isprintable() and not SURROGATE_RE.match(c))
    return f"{door}:{clean}"[:MAX_ACTOR_CHARS]


def validate_expires_at(value: Any, now: dt.datetime) -> None:
    """An ``expires_at`` is a timezone-aware datetime after ``now``."""
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise ValidationError(
            "Enter a date and time with its UTC offset.", code="invalid_expires_at"
        )
    if value <= now:
        raise ValidationError("Must be in the future.", code="expires_at_past")


# NOTE: the RFC 3339 date-times the server parses, as a pattern (JSON Schema's ``format`` is only an
# annotation): real days, years 1000-9998, at most microseconds, upper-case T and Z.
_LEAP_YEAR = "(?:[1-9][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[13579][26]|[2468][048])00)"
_MONTH_DAY = (
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
DATE_TIME_PATTERN = (
    f"^(?:(?!9999)[1-9][0-9]{{3}}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
    "T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?"
    "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"
)
# A date alone, or a date-time as above: what ``after``, ``before`` and ``now`` take.
_DATE = f"(?:(?!9999)[1-9][0-9]{{3}}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
DATE_OR_DATE_TIME_PATTERN = f"^{_DATE}$|{DATE_TIME_PATTERN}"
