"""``manage.py memory_expire``: delete the facts past their ``expires_at``, in bounded pages."""

from __future__ import annotations

from typing import Any

from memory import ops
from memory.management.args import arg, at_least_one, batch_size
from memory.management.base import MemoryCommand
from memory.services.expiry import EXPIRE_BATCH


class Command(MemoryCommand):
    help = (
        "Delete every fact whose expires_at has passed, each leaving a last deleted version "
        "with actor 'expiry' in its history, and update each owner's cached copy. Reads leave "
        "expired facts out already; this sweeps them from the database. Pages through them "
        "--batch-size at a time, one short transaction per owner of a page."
    )

    arguments = (
        batch_size(
            default=EXPIRE_BATCH,
            help=f"Expired facts read per page (default {EXPIRE_BATCH}).",
        ),
        arg(
            "--limit",
            type=int,
            metavar="N",
            help="Stop after the page that deleted N facts; default: all of them.",
        ),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        at_least_one(options, "batch_size", "limit")
        count = ops.facts_expire(batch_size=options["batch_size"], limit=options["limit"])
        self.stdout.write(f"Deleted {count:,} expired fact(s).")
