"""``manage.py memory_import``: load an export document into an owner with no memory yet."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from memory import services
from memory.management.args import arg, owner_ids
from memory.management.base import MemoryCommand


class Command(MemoryCommand):
    help = (
        "Load an export document (manage.py memory_export, users/{user_id}/export/) into the "
        "owner it names, or into USER_ID with --as; only into an owner with no memory yet. "
        "The document is checked whole first: one bad item and nothing is stored."
    )

    arguments = (
        arg("file", metavar="FILE", help="The export document ('-': stdin)."),
        arg("--as", dest="owner_id", metavar="USER_ID", help="Import into this owner id."),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        target = options["owner_id"]
        if target is not None:
            (target,) = owner_ids([target])
        name = options["file"]
        try:
            data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
            document = orjson.loads(data)
        except OSError as e:
            raise CommandError(f"Cannot read {name}: {e}") from e
        except orjson.JSONDecodeError as e:
            raise CommandError(f"{name} is not JSON: {e}") from e
        try:
            result = services.memory_import(document=document, owner_id=target)
        except ValidationError as e:
            lines = [f"{path}: {' '.join(messages)}" for path, messages in e.message_dict.items()]
            raise CommandError("Nothing imported.\n" + "\n".join(lines)) from e
        self.stdout.write(
            f"Imported into {result.owner_id}: {result.turns:,} turns, {result.sessions:,} "
            f"sessions, {result.facts:,} facts ({result.fact_versions:,} versions)."
        )
