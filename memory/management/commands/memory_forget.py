"""``manage.py memory_forget``: forget owners (every turn, fact, session and cached copy)."""

from __future__ import annotations

from typing import Any

from memory import ops, services
from memory.management.args import arg, owner_ids
from memory.management.base import MemoryCommand


class Command(MemoryCommand):
    help = (
        "Forget owners: delete every turn, session, fact and fact version they have, and drop "
        "their cached copy. Asks for confirmation unless --yes/--noinput."
    )

    arguments = (
        arg("owner_ids", nargs="+", metavar="OWNER_ID", help="An owner id."),
        arg(
            "--yes",
            "-y",
            "--noinput",
            "--no-input",
            action="store_false",
            dest="interactive",
            help="Do not ask for confirmation.",
        ),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        self._forget(owner_ids(options["owner_ids"]), interactive=options["interactive"])

    def _forget(self, ids: list[str], *, interactive: bool) -> None:
        stored = []
        for owner_id in ids:
            summary = ops.owner_summary_get(owner_id=owner_id)
            if summary is None:
                self.stdout.write(f"{owner_id}: nothing stored.")
                continue
            stored.append(owner_id)
            self.stdout.write(
                f"{owner_id}: {summary['turns']:,} turns in {summary['sessions']:,} sessions, "
                f"{summary['facts']:,} facts ({summary['fact_versions']:,} versions)."
            )
        if not stored:
            return
        if interactive:
            answer = input(
                f"Forget {len(stored)} owner(s)? This cannot be undone. Type 'yes' to continue: "
            )
            if answer.strip().lower() != "yes":
                self.stdout.write("Nothing forgotten.")
                return
        forgotten = sum(services.memory_forget(owner_id=owner_id) for owner_id in stored)
        self.stdout.write(f"Forgot {forgotten} owner(s).")
