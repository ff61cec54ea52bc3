"""``manage.py memory_prune``: delete old turns, in small batches that keep the cache coherent."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError
from django.utils import timezone

from memory import ops
from memory.exceptions import MemoryUnavailable
from memory.management.args import (
    arg,
    at_least_one,
    batch_size,
    dry_run,
    owner_ids,
    owner_option,
    parse_age,
)
from memory.management.base import MemoryCommand


class Command(MemoryCommand):
    help = (
        "Delete turns older than an age (--older-than 30d) and/or beyond the last N of each "
        "owner (--keep-last N); with both, a turn goes only if both hold. Deletes in batches, "
        "one short transaction each, and drops each pruned owner's cached copy. Try --dry-run "
        "first."
    )

    arguments = (
        arg("--older-than", metavar="AGE", help="30d, 12h, 90m, 2w or 45s."),
        arg("--keep-last", type=int, metavar="N", help="Keep each owner's last N turns."),
        owner_option("Prune only this owner (repeatable); default: every owner.", default=[]),
        batch_size(default=1000, help="Turns deleted per transaction (default 1000)."),
        dry_run("Print what would go; delete nothing."),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["older_than"] is None and options["keep_last"] is None:
            raise CommandError("Give --older-than, --keep-last, or both.")
        before = None
        if options["older_than"] is not None:
            before = timezone.now() - parse_age(options["older_than"])
        keep_last = options["keep_last"]
        if keep_last is not None and keep_last < 0:
            raise CommandError("--keep-last must be 0 or more.")
        at_least_one(options, "batch_size")
        # NOTE: every owner is read in chunks as the prune goes, never all ids at once.
        ids = owner_ids(options["owner"]) or ops.owner_id_iter(min_last_seq=keep_last or 0)
        dry_run = options["dry_run"]
        total = owners = 0
        try:
            for owner_id in ids:
                count = ops.turns_prune(
                    owner_id=owner_id,
                    before=before,
                    keep_last=keep_last,
                    batch_size=options["batch_size"],
                    dry_run=dry_run,
                )
                if count:
                    total += count
                    owners += 1
                    if options["verbosity"] >= 1:
                        verb = "would delete" if dry_run else "deleted"
                        self.stdout.write(f"{owner_id}: {verb} {count:,} turn(s)")
        except MemoryUnavailable as e:
            raise CommandError(f"{e} ({total:,} turns pruned before that.)") from e
        if dry_run:
            self.stdout.write(f"Dry run: would delete {total:,} turn(s) of {owners} owner(s).")
        else:
            self.stdout.write(f"Deleted {total:,} turn(s) of {owners} owner(s).")
