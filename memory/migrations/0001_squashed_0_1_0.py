"""The schema that 0.1.0 shipped (its migrations 0001-0003, squashed): owners, turns, facts and
their versions, sessions, the cache's invalidation log; on PostgreSQL the stamp sequence and the
turns' search document with its GIN indexes (``btree_gin``, ``pg_trgm``).

A site on 0.1.0 has this already and goes on with ``0002_squashed_since_0_1_0``.
"""

from __future__ import annotations

from django.contrib.postgres.operations import BtreeGinExtension, TrigramExtension
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from memory.migrations import _fields
from memory.postgres import sql

# NOTE: the search document is a stored generated column, not a model field: SQLite (the
# demo) has neither tsvector nor GIN, and loading a turn never needs it. Postgres does not
# change the type of a column that a generated column reads: an AlterField of Turn.content
# must drop and re-create the column around it.
SEARCH = [
    "ALTER TABLE memory_turn ADD COLUMN search tsvector"
    " GENERATED ALWAYS AS (memory_search_document(content)) STORED",
    "CREATE INDEX memory_turn_search_idx ON memory_turn USING gin (owner_id, search)",
    "CREATE INDEX memory_turn_trgm_idx ON memory_turn USING gin (owner_id, content gin_trgm_ops)",
]


def _postgres_forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE SEQUENCE IF NOT EXISTS memory_stamp_seq")
    sql.search_document_create(schema_editor)
    for statement in SEARCH:
        schema_editor.execute(statement, params=None)


def _postgres_backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in (
        "DROP INDEX IF EXISTS memory_turn_trgm_idx",
        "DROP INDEX IF EXISTS memory_turn_search_idx",
        "ALTER TABLE memory_turn DROP COLUMN IF EXISTS search",
        "DROP FUNCTION IF EXISTS memory_search_document(text)",
        "DROP SEQUENCE IF EXISTS memory_stamp_seq",
    ):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("memory", "0001_initial"),
        ("memory", "0002_stamp_sequence"),
        ("memory", "0003_turn_search"),
    ]

    dependencies: list[tuple[str, str]] = []

    operations = [
        _fields.model(
            "CacheInvalidation",
            [
                ("external_id", models.CharField(max_length=128)),
                ("stamp", models.BigIntegerField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            {
                "default_permissions": (),
                "indexes": [
                    models.Index(fields=["created_at"], name="memory_cacheinval_created_idx")
                ],
            },
        ),
        _fields.model(
            "Owner",
            [
                ("external_id", models.CharField(max_length=128, unique=True)),
                ("last_seq", models.BigIntegerField(default=0)),
                ("stamp", models.BigIntegerField(default=0)),
                ("cache_dirty", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            {
                "verbose_name": "memory owner",
                "ordering": ["external_id"],
                "permissions": [("access_all_memories", "Can read and write every owner's memory")],
                "indexes": [
                    models.Index(
                        condition=models.Q(("cache_dirty", True)),
                        fields=["updated_at"],
                        name="memory_owner_dirty_idx",
                    ),
                    models.Index(fields=["-updated_at"], name="memory_owner_recent_idx"),
                ],
            },
        ),
        _fields.model(
            "FactVersion",
            [
                ("key", models.CharField(max_length=64)),
                ("value", models.JSONField(null=True)),
                ("version", models.PositiveIntegerField()),
                ("session_id", models.CharField(blank=True, max_length=128, null=True)),
                ("source_turn_seq", models.BigIntegerField(blank=True, null=True)),
                ("deleted", models.BooleanField(default=False)),
                ("updated_at", models.DateTimeField()),
                ("owner", _fields.owner("fact_versions")),
            ],
            {
                "ordering": ["owner_id", "key", "-version"],
                "default_permissions": ("view",),
                "constraints": [
                    models.UniqueConstraint(
                        fields=("owner", "key", "version"), name="memory_factversion_uniq"
                    )
                ],
            },
        ),
        _fields.model(
            "Fact",
            [
                ("key", models.CharField(max_length=64)),
                ("value", models.JSONField()),
                ("version", models.PositiveIntegerField(default=1)),
                ("session_id", models.CharField(blank=True, max_length=128, null=True)),
                ("source_turn_seq", models.BigIntegerField(blank=True, null=True)),
                ("updated_at", models.DateTimeField()),
                ("owner", _fields.owner("facts")),
            ],
            {
                "ordering": ["owner_id", "key"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("owner", "key"), name="memory_fact_owner_key_uniq"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("version__gte", 1)), name="memory_fact_version_positive"
                    ),
                ],
            },
        ),
        _fields.model(
            "Session",
            [
                ("session_id", models.CharField(max_length=128)),
                ("first_seen", models.DateTimeField()),
                ("last_seen", models.DateTimeField()),
                ("turn_count", models.PositiveIntegerField(default=0)),
                ("owner", _fields.owner("sessions")),
            ],
            {
                "verbose_name": "chat session",
                "ordering": ["-last_seen"],
                "default_permissions": ("view",),
                "indexes": [
                    models.Index(fields=["owner", "-last_seen"], name="memory_session_recent_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("owner", "session_id"), name="memory_session_owner_sid_uniq"
                    )
                ],
            },
        ),
        _fields.model(
            "Turn",
            [
                ("seq", models.BigIntegerField()),
                ("session_id", models.CharField(max_length=128)),
                (
                    "role",
                    models.CharField(
                        choices=[
                            ("user", "User"),
                            ("assistant", "Assistant"),
                            ("system", "System"),
                            ("tool", "Tool"),
                        ],
                        max_length=16,
                    ),
                ),
                ("content", models.TextField()),
                ("metadata", models.JSONField(blank=True, default=dict)),
                ("idempotency_key", models.CharField(blank=True, max_length=128, null=True)),
                ("created_at", models.DateTimeField()),
                ("owner", _fields.owner("turns")),
            ],
            {
                "ordering": ["owner_id", "seq"],
                "default_permissions": ("view", "delete"),
                "indexes": [
                    models.Index(
                        fields=["owner", "session_id", "seq"], name="memory_turn_session_idx"
                    )
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("owner", "seq"), name="memory_turn_owner_seq_uniq"
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("idempotency_key__isnull", False)),
                        fields=("owner", "idempotency_key"),
                        name="memory_turn_idempotency_uniq",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("seq__gte", 1)), name="memory_turn_seq_positive"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("role__in", ["user", "assistant", "system", "tool"])),
                        name="memory_turn_role_valid",
                    ),
                ],
            },
        ),
        BtreeGinExtension(),
        TrigramExtension(),
        migrations.RunPython(_postgres_forwards, _postgres_backwards, elidable=False),
    ]
