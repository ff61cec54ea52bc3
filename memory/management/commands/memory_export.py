"""``manage.py memory_export``: write an owner's whole memory as the export document."""

from __future__ import annotations

import os
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from memory import selectors
from memory.management.args import arg, owner_ids
from memory.management.base import MemoryCommand


class Command(MemoryCommand):
    help = (
        "Write the owner's whole memory (facts, their history, turns, sessions) as the export "
        "document of the REST API's users/{user_id}/export/, read from one snapshot; to stdout, "
        "or to FILE with -o (written whole or not at all)."
    )

    arguments = (
        arg("owner_id", metavar="USER_ID", help="The owner id."),
        arg("-o", "--output", metavar="FILE", help="Write to FILE, not stdout."),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        (owner_id,) = owner_ids([options["owner_id"]])
        output = options["output"]
        try:
            stream = selectors.owner_export(owner_id=owner_id)
            if output is None:
                # NOTE: bytes to a real stdout (no re-encoding of megabytes), text to another
                # stream (a test's StringIO); every chunk is whole UTF-8.
                binary = getattr(self.stdout, "buffer", None)
                for chunk in stream:
                    if binary is not None:
                        binary.write(chunk)
                    else:
                        self.stdout.write(chunk.decode(), ending="")
                self.stdout.write("")
                return
            # NOTE: into a file beside the target, renamed over it once complete, so that a
            # failed export never leaves a truncated document under the name asked for.
            partial = f"{output}.partial"
            try:
                with open(partial, "wb") as file:
                    for chunk in stream:
                        file.write(chunk)
                os.replace(partial, output)
            except BaseException:
                stream.close()
                if os.path.exists(partial):
                    os.remove(partial)
                raise
        except OSError as e:
            raise CommandError(str(e)) from e
        except ValidationError as e:
            raise CommandError("; ".join(e.messages)) from e
        self.stderr.write(f"Wrote the memory of {owner_id} to {output}.")
