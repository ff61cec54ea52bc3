"""The options several memory management commands share, and the checks of their values."""

from __future__ import annotations

import datetime as dt
import re
from argparse import _ActionsContainer
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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


def grace_age(text: str) -> dt.timedelta:
    """``--older-than`` of a re-enqueue: ``parse_age``, or ``0``/``0s`` for every record now."""
    return dt.timedelta(0) if text.strip() in ("0", "0s") else parse_age(text)


def at_least_one(options: dict[str, Any], *names: str) -> None:
    """A ``CommandError`` ``--<name> must be at least 1.`` for the first option given below 1."""
    for name in names:
        if options[name] is not None and options[name] < 1:
            raise CommandError(f"--{name.replace('_', '-')} must be at least 1.")


@dataclass(frozen=True)
class Arg:
    """One argument of a command, as data: ``parser.add_argument(*names, **options)``."""

    names: tuple[str, ...]
    options: dict[str, Any]


def arg(*names: str, **options: Any) -> Arg:
    """The ``Arg`` that ``parser.add_argument(*names, **options)`` declares."""
    return Arg(names, options)


def arguments_add(parser: _ActionsContainer, *arguments: Arg) -> None:
    """Add each of ``arguments`` to ``parser`` (a parser, a group or a subcommand's), in order."""
    for argument in arguments:
        parser.add_argument(*argument.names, **argument.options)


def owner_option(help: str, **kwargs: Any) -> Arg:
    """``--owner ID``, repeatable, collected into ``options["owner"]``."""
    return arg("--owner", action="append", metavar="ID", help=help, **kwargs)


def batch_size(*, default: int, help: str) -> Arg:
    """``--batch-size N``, read back with ``at_least_one``."""
    return arg("--batch-size", type=int, default=default, metavar="N", help=help)


def dry_run(help: str) -> Arg:
    """``--dry-run``: report what would change, change nothing."""
    return arg("--dry-run", action="store_true", help=help)


def pending_options(*, pending: str, default: str, age: str) -> tuple[Arg, Arg]:
    """``--pending`` (re-enqueue the deferred work whose task never ran) and ``--older-than``
    (``AGE``, default ``default``), read back with ``grace_age``."""
    return (
        arg("--pending", action="store_true", help=pending),
        arg("--older-than", default=default, metavar="AGE", help=age),
    )
