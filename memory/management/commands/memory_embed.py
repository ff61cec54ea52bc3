"""``manage.py memory_embed``: embed every turn that has no vector yet (the backfill), in pages,
stoppable and resumable; ``USER_ID``: one owner's; ``--setup``: create pgvector and the vector
table once the server has the extension; ``--stale``: embed everything again (a new model)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError
from django.db import DEFAULT_DB_ALIAS

from memory.conf import conf
from memory.management.args import arg
from memory.management.base import MemoryCommand
from memory.recall import vectors
from memory.services import embeddings


class Command(MemoryCommand):
    help = (
        "Embed the turns that have no vector yet (MEMORY['EMBEDDER'], in batches of "
        "MEMORY['EMBED_BATCH_TURNS'], each written with its owner's progress): every owner's, or "
        "USER_ID's. Stop it any time (Ctrl-C) and run it again: it goes on where it stopped. "
        "--limit N stops after N turns. --setup creates pgvector and the vector table (after "
        "the extension was installed on the server; CREATE EXTENSION needs a superuser). "
        "--stale makes every vector due again, for a new embedder model, before embedding."
    )

    arguments = (
        arg("user_id", nargs="?", help="Only this owner's turns."),
        arg("--limit", type=int, default=None, help="Stop after this many turns."),
        arg("--setup", action="store_true", help="Create pgvector and the vector table first."),
        arg("--stale", action="store_true", help="Embed every turn again (a new model)."),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        limit = options["limit"]
        if limit is not None and limit < 1:
            raise CommandError("--limit must be a positive number of turns.")
        if options["setup"]:
            self._setup()
        try:
            if conf.EMBEDDER is None:
                raise CommandError("MEMORY['EMBEDDER'] is None: search by meaning is off here.")
            if not vectors.vectors_ready(DEFAULT_DB_ALIAS):
                raise CommandError(
                    "The database has no pgvector or no vector table: install pgvector on the "
                    "server, then run `manage.py memory_embed --setup`."
                )
            if options["stale"]:
                owners = embeddings.embeddings_restale()
                self.stdout.write(f"Made the vectors of {owners:,} owner(s) due again.")
            if options["user_id"]:
                done = embeddings.turns_embed(owner_id=options["user_id"], limit=limit)
            else:
                done = embeddings.embeddings_backfill(limit=limit)
        except ImproperlyConfigured as e:
            raise CommandError(str(e)) from e
        self.stdout.write(f"Embedded {done:,} turn(s).")

    def _setup(self) -> None:
        if not embeddings.vectors_create(DEFAULT_DB_ALIAS):
            raise CommandError(
                "pgvector could not be created: the server does not have it installed, this "
                "database role may not CREATE EXTENSION, or the database is not PostgreSQL."
            )
        self.stdout.write("pgvector and the vector tables are ready.")
