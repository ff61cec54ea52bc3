"""``manage.py memory_summarize USER_ID``: refresh a user's summary now, in this process;
``--pending``: enqueue again the due refreshes whose task never ran."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory import ops
from memory.exceptions import MemoryUnavailable
from memory.management.args import parse_age


class Command(BaseCommand):
    help = (
        "Refresh USER_ID's summary now, in this process (MEMORY['SUMMARIZER'], in batches). "
        "With --pending instead: hand every due summary refresh enqueued longer ago than "
        "--older-than (default 5m) to the task backend again; run it when a worker starts "
        "and from cron. A refresh run twice summarises each turn once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user_id", nargs="?", help="The owner whose summary to refresh.")
        parser.add_argument(
            "--pending", action="store_true", help="Enqueue again the due refreshes."
        )
        parser.add_argument(
            "--older-than",
            default="5m",
            metavar="AGE",
            help="With --pending: only records last enqueued longer ago: 0, 45s, 5m (default 5m).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user_id, pending = options["user_id"], options["pending"]
        if bool(user_id) == pending:
            raise CommandError("Give a USER_ID or --pending.")
        try:
            if user_id:
                batches = ops.summary_refresh(owner_id=user_id)
                self.stdout.write(f"Wrote {batches:,} summary batch(es) for {user_id}.")
                return
            text = options["older_than"]
            grace = dt.timedelta(0) if text.strip() in ("0", "0s") else parse_age(text)
            try:
                from memory.services.deferred import summaries_pending_enqueue
            except ImportError as e:
                raise CommandError(f"Enqueueing refreshes needs django-tasks: {e}") from e
            count = summaries_pending_enqueue(grace=grace)
        except ValidationError as e:
            raise CommandError(" ".join(e.messages)) from e
        except MemoryUnavailable as e:
            raise CommandError(str(e)) from e
        self.stdout.write(f"Enqueued {count:,} pending summary refresh(es).")
