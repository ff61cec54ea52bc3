"""``manage.py memory_forget_idle --prefix anon- --idle-for 30d``: forget the owners of an id
prefix that nothing wrote to for that long (a retention rule, e.g. for anonymous visitors)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from memory import ops
from memory.management.args import arg, dry_run, parse_age
from memory.management.base import MemoryCommand


class Command(MemoryCommand):
    help = (
        "Forget every owner whose id starts with --prefix and that no write touched for longer "
        "than --idle-for (30d): every turn, fact and session, and the cached copy, one owner "
        "per transaction. Run it from cron (the demo's worker also runs it as a task)."
    )

    arguments = (
        arg("--prefix", help="The owner ids' prefix, such as anon- (required)."),
        arg(
            "--idle-for", metavar="AGE", help="Unwritten for longer than: 30d, 12h, 2w (required)."
        ),
        dry_run("Count the owners that would go; change nothing."),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        prefix = options["prefix"]
        if not prefix:
            raise CommandError("Give --prefix, the start of the owner ids to forget (anon-).")
        if not options["idle_for"]:
            raise CommandError("Give --idle-for, how long unwritten (30d).")
        idle_for = parse_age(options["idle_for"], option="--idle-for")
        if options["dry_run"]:
            count = ops.owners_idle_count(prefix=prefix, idle_for=idle_for)
            self.stdout.write(f"{count:,} owner(s) would go.")
            return
        forgotten = ops.owners_forget_idle(prefix=prefix, idle_for=idle_for)
        self.stdout.write(f"Forgot {forgotten:,} owner(s).")
