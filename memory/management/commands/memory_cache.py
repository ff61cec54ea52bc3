"""``manage.py memory_cache``: warm or drop owners' cached copies in Redis.

``warm`` reads each owner's context through the cache (a miss rehydrates it); ``drop`` removes
the copy, so that the next read rehydrates. Neither changes anything in the database.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from memory import ops, selectors
from memory.management.args import arg, arguments_add, at_least_one, owner_ids, owner_option
from memory.management.base import MemoryCommand


class Command(MemoryCommand):
    help = "Warm or drop the Redis copy of owners' memory."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{warm,drop}")
        warm = actions.add_parser(
            "warm", help="Read owners' context through the cache, rehydrating their copy."
        )
        which = warm.add_mutually_exclusive_group(required=True)
        arguments_add(
            which,
            owner_option("An owner id (repeatable).", default=[]),
            arg("--recent", type=int, metavar="N", help="The N owners written to most recently."),
        )
        drop = actions.add_parser("drop", help="Drop owners' cached copy.")
        arguments_add(drop, owner_option("An owner id (repeatable).", required=True))

    def handle(self, *args: Any, **options: Any) -> None:
        cache = selectors.health_get()["cache"]
        if cache != "ok":
            raise CommandError(f"The cache is {cache}: there is no copy to warm or drop.")
        if options["action"] == "warm":
            self._warm(options)
        else:
            self._drop(owner_ids(options["owner"]))

    def _warm(self, options: dict[str, Any]) -> None:
        at_least_one(options, "recent")
        if options["recent"] is not None:
            ids = ops.owner_recent_list(limit=options["recent"])
        else:
            ids = owner_ids(options["owner"])
        warmed = 0
        for owner_id in ids:
            if not selectors.owner_exists(owner_id=owner_id):
                self.stderr.write(f"{owner_id}: nothing stored, skipped.")
                continue
            source = selectors.context_get(owner_id=owner_id)["source"]
            warmed += 1
            if options["verbosity"] >= 2:
                state = "was warm" if source == "cache" else "rehydrated"
                self.stdout.write(f"{owner_id}: {state}")
        self.stdout.write(f"Warmed {warmed} owner(s).")

    def _drop(self, ids: list[str]) -> None:
        failed = [owner_id for owner_id in ids if not ops.cache_drop(owner_id=owner_id)]
        if failed:
            raise CommandError(f"Redis did not confirm the drop for: {', '.join(failed)}.")
        self.stdout.write(f"Dropped the cached copy of {len(ids)} owner(s).")
