"""The options several memory management commands share, and the checks of their values."""

from __future__ import annotations

import datetime as dt
import re
from argparse import _ActionsContainer
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

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


def grace_age(text: str) -> dt.timedelta:
    """``--older-than`` of a re-enqueue: ``parse_age``, or ``0``/``0s`` for every record now."""
    return dt.timedelta(0) if text.strip() in ("0", "0s") else parse_age(text)


def at_least_one(options: dict[str, Any], *names: str) -> None:
    """A ``CommandError`` ``--<name> must be at least 1.`` for the first option given below 1."""
    for name in names:
        if options[name] is not None and options[name] < 1:
            raise CommandError(f"--{name.replace('_', '-')} must be at least 1.")


def add_owner_option(parser: _ActionsContainer, help: str, **kwargs: Any) -> None:
    """``--owner ID``, repeatable, collected into ``options["owner"]``."""
    parser.add_argument("--owner", action="append", metavar="ID", help=help, **kwargs)


def add_batch_size(parser: CommandParser, *, default: int, help: str) -> None:
    """``--batch-size N``, read back with ``at_least_one``."""
    parser.add_argument("--batch-size", type=int, default=default, metavar="N", help=help)


def add_dry_run(parser: CommandParser, help: str) -> None:
    """``--dry-run``: report what would change, change nothing."""
    parser.add_argument("--dry-run", action="store_true", help=help)


def add_pending_options(parser: CommandParser, *, pending: str, default: str, age: str) -> None:
    """``--pending`` (re-enqueue the deferred work whose task never ran) and ``--older-than``
    (``AGE``, default ``default``), read back with ``grace_age``."""
    parser.add_argument("--pending", action="store_true", help=pending)
    parser.add_argument("--older-than", default=default, metavar="AGE", help=age)
