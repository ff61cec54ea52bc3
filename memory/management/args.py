"""Argument helpers shared by the memory management commands."""

from __future__ import annotations

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
