"""Everything since 0.1.0, squashed. On every database: the work queues of deferred
extraction and summaries, owner links, summaries, facts that expire and the actor of each fact
version, the owners' embedding mark, the vector models, LangGraph's checkpoints and the store's
vectors. On PostgreSQL:

- the owners' search vocabulary (``memory_search_words()``, ``memory_searchword`` and its
  triggers), which replaces the content's trigram index, filled from the turns already there;
- no index of an owner foreign key alone (each table's unique constraint starts with the owner
  and serves the same lookups) and no ``LIKE`` index of ``Owner.external_id``: dropped and
  renamed in place, where Django's own operations would re-validate every foreign key;
- ``memory_turn_append()``, an append in one round trip (``memory/postgres/turn_append.py``);
- pgvector and the turns' and facts' vector tables, where the server has the extension and the
  role may create it (else ``memory.W016`` says so, and ``manage.py memory_embed --setup``
  creates them later);
- the store vectors' key to their fact, cascading in the database.

Each function's SQL is a file of ``memory/postgres/sql/``; a later change of one runs its
``*_create`` again in a migration of its own.
"""

from __future__ import annotations

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from memory.migrations import _fields
from memory.postgres import sql

_FOREIGN_KEY_INDEXES = {
    "memory_fact": "memory_fact_owner_id_0a661e21",
    "memory_factversion": "memory_factversion_owner_id_9481254c",
    "memory_session": "memory_session_owner_id_8a052684",
    "memory_turn": "memory_turn_owner_id_97ea5acf",
}
_LIKE_INDEX = "memory_owner_external_id_c83473d6_like"


def _vocabulary_forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if not sql.search_words_create(schema_editor):
        return
    schema_editor.execute("DROP INDEX IF EXISTS memory_turn_trgm_idx")
    # The words of the turns there already.
    schema_editor.execute(
        "INSERT INTO memory_searchword (owner_id, key, word)"
        " SELECT n.owner_id, k.key, n.word FROM ("
        "   SELECT DISTINCT t.owner_id, w.word FROM memory_turn AS t,"
        "   unnest(memory_search_words(t.content)) AS w(word) WHERE char_length(w.word) <= 32"
        " ) AS n CROSS JOIN LATERAL unnest(memory_search_keys(n.word)) AS k(key)"
        " ON CONFLICT DO NOTHING",
        params=None,
    )
    schema_editor.execute("ANALYZE memory_searchword", params=None)


def _vocabulary_backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in (
        "CREATE INDEX IF NOT EXISTS memory_turn_trgm_idx ON memory_turn"
        " USING gin (owner_id, content gin_trgm_ops)",
        "DROP TRIGGER IF EXISTS memory_owner_searchword_delete ON memory_owner",
        "DROP TRIGGER IF EXISTS memory_turn_searchword_update ON memory_turn",
        "DROP TRIGGER IF EXISTS memory_turn_searchword_insert ON memory_turn",
        "DROP FUNCTION IF EXISTS memory_searchword_forget()",
        "DROP FUNCTION IF EXISTS memory_searchword_add()",
        "DROP TABLE IF EXISTS memory_searchword",
        "DROP FUNCTION IF EXISTS memory_search_keys(text)",
        "DROP FUNCTION IF EXISTS memory_search_words(text)",
    ):
        schema_editor.execute(statement, params=None)


def _indexes_forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "ALTER TABLE memory_owner RENAME CONSTRAINT memory_owner_external_id_key"
        " TO memory_owner_external_id_uniq"
    )
    for name in (_LIKE_INDEX, *_FOREIGN_KEY_INDEXES.values()):
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


def _indexes_backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, name in _FOREIGN_KEY_INDEXES.items():
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} (owner_id)")
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {_LIKE_INDEX}"
        " ON memory_owner (external_id varchar_pattern_ops)"
    )
    schema_editor.execute(
        "ALTER TABLE memory_owner RENAME CONSTRAINT memory_owner_external_id_uniq"
        " TO memory_owner_external_id_key"
    )


def _append_forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    sql.turn_append_create(schema_editor)


def _append_backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {sql.TURN_APPEND_SIGNATURE}")


def _vectors_forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    sql.vectors_setup(schema_editor)


def _store_vector_cascade(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "ALTER TABLE memory_storevector ADD CONSTRAINT memory_storevector_fact_fk"
            " FOREIGN KEY (fact_id) REFERENCES memory_fact (id) ON DELETE CASCADE",
            params=None,
        )


def _store_vector_uncascade(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "ALTER TABLE memory_storevector DROP CONSTRAINT memory_storevector_fact_fk",
            params=None,
        )


def _vectors_backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP TABLE IF EXISTS memory_factvector")
        schema_editor.execute("DROP TABLE IF EXISTS memory_turnvector")


class Migration(migrations.Migration):
    replaces = [
        ("memory", "0004_cache_db_clock"),
        ("memory", "0005_pending_extraction"),
        ("memory", "0006_session_page_index"),
        ("memory", "0007_search_words"),
        ("memory", "0008_turn_append_function"),
        ("memory", "0009_drop_redundant_indexes"),
        ("memory", "0010_turn_append_json_equality"),
        ("memory", "0011_owner_link"),
        ("memory", "0012_summaries"),
        ("memory", "0013_turn_append_summary_tokens"),
        ("memory", "0014_fact_expiry_actor"),
        ("memory", "0015_turn_vectors"),
        ("memory", "0016_fact_vectors"),
        ("memory", "0002_since_0_1_0"),
        ("memory", "0003_langgraph"),
        ("memory", "0004_turn_append_owner_update"),
    ]

    dependencies = [("memory", "0001_squashed_0_1_0")]

    operations = [
        migrations.AlterField(
            model_name="cacheinvalidation",
            name="created_at",
            field=models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
        ),
        _fields.work_queue(
            "PendingExtraction",
            ("turn", _fields.loose_key("memory.turn", one=True)),
            "memory_pending_enqueued_idx",
        ),
        migrations.RemoveIndex(
            model_name="session",
            name="memory_session_recent_idx",
        ),
        migrations.AddIndex(
            model_name="session",
            index=models.Index(
                fields=["owner", "-last_seen", "session_id"], name="memory_session_page_idx"
            ),
        ),
        migrations.RunPython(_vocabulary_forwards, _vocabulary_backwards, elidable=False),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(_indexes_forwards, _indexes_backwards)],
            state_operations=[
                migrations.AddConstraint(
                    model_name="owner",
                    constraint=models.UniqueConstraint(
                        fields=("external_id",), name="memory_owner_external_id_uniq"
                    ),
                ),
                *(
                    migrations.AlterField(
                        model_name=model, name="owner", field=_fields.owner(related, db_index=False)
                    )
                    for model, related in (
                        ("fact", "facts"),
                        ("factversion", "fact_versions"),
                        ("session", "sessions"),
                        ("turn", "turns"),
                    )
                ),
                migrations.AlterField(
                    model_name="owner",
                    name="external_id",
                    field=models.CharField(max_length=128),
                ),
            ],
        ),
        _fields.model(
            "OwnerLink",
            [
                ("seqs", models.JSONField(default=dict)),
                (
                    "started_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("source", _fields.owner("+", one=True)),
                ("target", _fields.owner("+")),
            ],
            {
                "default_permissions": (),
            },
        ),
        _fields.add("owner", "summary_tokens", models.BigIntegerField(db_default=0)),
        _fields.work_queue(
            "PendingSummary",
            ("owner", _fields.owner("+", one=True)),
            "memory_pendsumm_enqueued_idx",
        ),
        _fields.model(
            "Summary",
            [
                ("text", models.TextField()),
                ("through_seq", models.BigIntegerField()),
                ("tokens", models.PositiveIntegerField(default=0)),
                ("updated_at", models.DateTimeField()),
                ("owner", _fields.owner("summary", one=True)),
            ],
            {
                "verbose_name": "conversation summary",
                "verbose_name_plural": "conversation summaries",
                "default_permissions": ("view",),
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("through_seq__gte", 1)),
                        name="memory_summary_through_seq_positive",
                    )
                ],
            },
        ),
        *(
            _fields.add(model, "expires_at", models.DateTimeField(blank=True, null=True))
            for model in ("fact", "factversion")
        ),
        # NOTE: the default fills the versions stored before (Django drops it from the column
        # after: every writer names its actor).
        _fields.add("factversion", "actor", models.CharField(default="python", max_length=200)),
        migrations.AddIndex(
            model_name="fact",
            index=models.Index(
                condition=models.Q(("expires_at__isnull", False)),
                fields=["expires_at", "id"],
                name="memory_fact_expires_idx",
            ),
        ),
        migrations.RunPython(_append_forwards, _append_backwards, elidable=False),
        _fields.add("owner", "embedded_seq", models.BigIntegerField(db_default=0)),
        _fields.vector_table("TurnVector", "memory.turn"),
        _fields.vector_table(
            "FactVector", "memory.fact", ("version", models.PositiveIntegerField())
        ),
        migrations.RunPython(_vectors_forwards, _vectors_backwards, elidable=False),
        _fields.model(
            "Checkpoint",
            [
                *_fields.thread(),
                ("checkpoint_id", models.CharField(max_length=128)),
                ("parent_checkpoint_id", models.CharField(blank=True, max_length=128, null=True)),
                ("type", models.CharField(max_length=64)),
                ("checkpoint", models.BinaryField()),
                ("metadata", models.JSONField(default=dict)),
                ("channel_versions", models.JSONField(default=dict)),
                ("created_at", models.DateTimeField()),
                ("owner", _fields.owner("checkpoints", db_index=False)),
            ],
            {
                "verbose_name": "LangGraph checkpoint",
                "default_permissions": ("view",),
                "constraints": [
                    models.UniqueConstraint(
                        fields=("owner", "thread_id", "checkpoint_ns", "checkpoint_id"),
                        name="memory_checkpoint_uniq",
                    )
                ],
            },
        ),
        _fields.model(
            "CheckpointBlob",
            [
                *_fields.thread(),
                ("channel", models.TextField()),
                ("version", models.CharField(max_length=128)),
                ("type", models.CharField(max_length=64)),
                ("blob", models.BinaryField(null=True)),
                ("owner", _fields.owner("+", db_index=False)),
            ],
            _fields.internal(
                "memory_checkpointblob_uniq",
                "owner",
                "thread_id",
                "checkpoint_ns",
                "channel",
                "version",
            ),
        ),
        _fields.model(
            "CheckpointWrite",
            [
                *_fields.thread(),
                ("checkpoint_id", models.CharField(max_length=128)),
                ("task_id", models.TextField()),
                ("task_path", models.TextField(blank=True, default="")),
                ("idx", models.IntegerField()),
                ("channel", models.TextField()),
                ("type", models.CharField(max_length=64)),
                ("blob", models.BinaryField()),
                ("owner", _fields.owner("+", db_index=False)),
            ],
            _fields.internal(
                "memory_checkpointwrite_uniq",
                "owner",
                "thread_id",
                "checkpoint_ns",
                "checkpoint_id",
                "task_id",
                "idx",
            ),
        ),
        _fields.model(
            "StoreVector",
            [
                ("model", models.CharField(max_length=100)),
                ("path", models.CharField(max_length=200)),
                ("version", models.PositiveIntegerField()),
                ("vector", models.JSONField()),
                ("fact", _fields.loose_key("memory.fact")),
            ],
            _fields.internal("memory_storevector_uniq", "fact", "model", "path"),
        ),
        migrations.RunPython(_store_vector_cascade, _store_vector_uncascade),
    ]
