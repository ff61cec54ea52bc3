"""Argument helpers shared by the memory management commands."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from memory.validators import validate_owner_id


def owner_ids(values: Iterable[str]) -> list[str]:
    """The owner ids given, each once and in order; ``CommandError`` names the first bad one."""
    for value in values:
        try:
            validate_owner_id(value)
        except ValidationError as e:
            raise CommandError(f"Bad owner id {value!r}: {'; '.join(e.messages)}") from e
    return list(dict.fromkeys(values))


AGE_RE = re.compile(r"^(\d+)([smhdw])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str, option: str = "--older-than") -> dt.timedelta:
    """``30d``, ``12h``, ``90m``, ``2w``, ``45s`` as a positive ``timedelta``; a
    ``CommandError`` naming ``option`` for anything else."""
    match = AGE_RE.fullmatch(text.strip())
    if match is None or int(match[1]) == 0:
        raise CommandError(
            f"{option} {text!r}: give a positive number and a unit s, m, h, d or w (30d)."
        )
    return dt.timedelta(**{UNITS[match[2]]: int(match[1])})
