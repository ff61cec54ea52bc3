"""The base of the memory management commands: the memory's errors end a command as a
``CommandError`` with their message, never a traceback."""

from __future__ import annotations

import importlib
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory.exceptions import MemoryUnavailable
from memory.management.args import Arg, arguments_add, grace_age


class MemoryCommand(BaseCommand):
    """A command whose ``handle`` may raise ``MemoryUnavailable`` (its text) or a
    ``ValidationError`` (its messages, space-separated): both become a ``CommandError``. Its
    ``arguments`` are added to the parser in order."""

    arguments: tuple[Arg, ...] = ()

    def add_arguments(self, parser: CommandParser) -> None:
        arguments_add(parser, *self.arguments)

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except MemoryUnavailable as e:
            raise CommandError(str(e)) from e
        except ValidationError as e:
            raise CommandError(" ".join(e.messages)) from e

    @staticmethod
    def pending_enqueue(options: dict[str, Any], *, task: str, needs: str) -> int:
        """How many records ``memory.services.deferred.<task>`` handed to the task backend again,
        of those enqueued longer ago than ``--older-than``; a ``CommandError`` naming ``needs``
        where django-tasks is missing."""
        grace = grace_age(options["older_than"])
        try:
            deferred = importlib.import_module("memory.services.deferred")
        except ImportError as e:
            raise CommandError(f"{needs} needs django-tasks: {e}") from e
        enqueue = getattr(deferred, task)
        return int(enqueue(grace=grace))
