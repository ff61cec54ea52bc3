"""``manage.py memory_summarize USER_ID``: refresh a user's summary now, in this process;
``--pending``: enqueue again the due refreshes whose task never ran."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from memory import ops
from memory.management.args import arg, pending_options
from memory.management.base import MemoryCommand


class Command(MemoryCommand):
    help = (
        "Refresh USER_ID's summary now, in this process (MEMORY['SUMMARIZER'], in batches). "
        "With --pending instead: hand every due summary refresh enqueued longer ago than "
        "--older-than (default 5m) to the task backend again; run it when a worker starts "
        "and from cron. A refresh run twice summarises each turn once."
    )

    arguments = (
        arg("user_id", nargs="?", help="The owner whose summary to refresh."),
        *pending_options(
            pending="Enqueue again the due refreshes.",
            default="5m",
            age="With --pending: only records last enqueued longer ago: 0, 45s, 5m (default 5m).",
        ),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        user_id, pending = options["user_id"], options["pending"]
        if bool(user_id) == pending:
            raise CommandError("Give a USER_ID or --pending.")
        if user_id:
            batches = ops.summary_refresh(owner_id=user_id)
            self.stdout.write(f"Wrote {batches:,} summary batch(es) for {user_id}.")
            return
        count = self.pending_enqueue(
            options, task="summaries_pending_enqueue", needs="Enqueueing refreshes"
        )
        self.stdout.write(f"Enqueued {count:,} pending summary refresh(es).")
