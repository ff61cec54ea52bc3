"""``manage.py memory_expire``: delete the facts past their ``expires_at``, in bounded pages."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory import ops
from memory.exceptions import MemoryUnavailable
from memory.services.expiry import EXPIRE_BATCH


class Command(BaseCommand):
    help = (
        "Delete every fact whose expires_at has passed, each leaving a last deleted version "
        "with actor 'expiry' in its history, and update each owner's cached copy. Reads leave "
        "expired facts out already; this sweeps them from the database. Pages through them "
        "--batch-size at a time, one short transaction per owner of a page."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size",
            type=int,
            default=EXPIRE_BATCH,
            metavar="N",
            help=f"Expired facts read per page (default {EXPIRE_BATCH}).",
        )
        parser.add_argument(
            "--limit",
            type=int,
            metavar="N",
            help="Stop after the page that deleted N facts; default: all of them.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1.")
        if options["limit"] is not None and options["limit"] < 1:
            raise CommandError("--limit must be at least 1.")
        try:
            count = ops.facts_expire(batch_size=options["batch_size"], limit=options["limit"])
        except MemoryUnavailable as e:
            raise CommandError(str(e)) from e
        self.stdout.write(f"Deleted {count:,} expired fact(s).")
