"""``manage.py memory_extract --pending``: enqueue again the deferred extractions whose task
never ran (a process that died after its commit, a lost or failed task)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from memory.management.args import pending_options
from memory.management.base import MemoryCommand


class Command(MemoryCommand):
    help = (
        "With --pending: hand every deferred fact extraction enqueued longer ago than "
        "--older-than (default 1m) to the task backend again, for the worker to run. Run it "
        "when a worker starts, and from cron every few minutes; a turn extracted twice is "
        "written once."
    )

    arguments = pending_options(
        pending="Enqueue again the pending extractions (the only mode, for now: required).",
        default="1m",
        age="Only records last enqueued longer ago: 0, 45s, 5m, 1h (default 1m).",
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["pending"]:
            raise CommandError("Give --pending.")
        count = self.pending_enqueue(options, task="pending_enqueue", needs="Deferred extraction")
        self.stdout.write(f"Enqueued {count:,} pending extraction(s).")
