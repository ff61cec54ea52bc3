"""``manage.py memory_fact_keys``: list, and with ``--rename`` rename, the facts whose key is
made only of dots (stored before such keys were refused; check ``memory.W010``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from memory import ops
from memory.management.args import arg
from memory.management.base import MemoryCommand

# Facts listed, or owners renamed, per round trip.
BATCH = 1000


class Command(MemoryCommand):
    help = (
        "List the facts whose key is made only of dots (. and .. are URL dot segments: a "
        "client's URL of such a fact collapses to the user's own). --rename renames them: "
        ". -> dot, .. -> dotdot, three or more -> dots-<n>, with -2, -3, ... after it where the "
        "user holds that key already; each leaves history as a delete and a put would."
    )

    arguments = (arg("--rename", action="store_true", help="Rename them."),)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["rename"]:
            self._rename()
        else:
            self._list()

    def _list(self) -> None:
        found = ops.fact_dot_key_list(limit=BATCH)
        for owner_id, key in found:
            self.stdout.write(f"{owner_id} {key}")
        more = f" (the first {BATCH})" if len(found) == BATCH else ""
        self.stdout.write(f"{len(found)} fact(s) with a key made only of dots{more}.")

    def _rename(self) -> None:
        renamed = 0
        while found := ops.fact_dot_key_list(limit=BATCH):
            done = 0
            for owner_id in dict.fromkeys(owner_id for owner_id, _ in found):
                for old, new in ops.fact_dot_keys_rename(owner_id=owner_id).items():
                    self.stdout.write(f"{owner_id}: {old} -> {new}")
                    done += 1
            if not done:
                # NOTE: only if the listing and the renaming disagreed; never loop on it.
                raise CommandError(f"{len(found)} fact(s) listed could not be renamed.")
            renamed += done
        self.stdout.write(f"Renamed {renamed} fact(s).")
