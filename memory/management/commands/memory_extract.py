"""``manage.py memory_extract --pending``: enqueue again the deferred extractions whose task
never ran (a process that died after its commit, a lost or failed task)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory.exceptions import MemoryUnavailable
from memory.management.args import parse_age


class Command(BaseCommand):
    help = (
        "With --pending: hand every deferred fact extraction enqueued longer ago than "
        "--older-than (default 1m) to the task backend again, for the worker to run. Run it "
        "when a worker starts, and from cron every few minutes; a turn extracted twice is "
        "written once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--pending",
            action="store_true",
            help="Enqueue again the pending extractions (the only mode, for now: required).",
        )
        parser.add_argument(
            "--older-than",
            default="1m",
            metavar="AGE",
            help="Only records last enqueued longer ago: 0, 45s, 5m, 1h (default 1m).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["pending"]:
            raise CommandError("Give --pending.")
        text = options["older_than"]
        # NOTE: 0 is allowed here (every record, now), unlike a prune's age.
        grace = dt.timedelta(0) if text.strip() in ("0", "0s") else parse_age(text)
        try:
            from memory.services.deferred import pending_enqueue
        except ImportError as e:
            raise CommandError(f"Deferred extraction needs django-tasks: {e}") from e
        try:
            count = pending_enqueue(grace=grace)
        except MemoryUnavailable as e:
            raise CommandError(str(e)) from e
        self.stdout.write(f"Enqueued {count:,} pending extraction(s).")
