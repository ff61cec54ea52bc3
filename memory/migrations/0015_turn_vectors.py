"""Search by meaning: ``Owner.embedded_seq`` everywhere, and ``memory_turnvector`` where the
database can hold vectors.

The table needs pgvector. On PostgreSQL this migration creates the extension where the server
has it (``CREATE EXTENSION`` needs a role allowed to: a superuser, or the database's owner
where the extension is trusted) and then the table, with keys that cascade in the database, so
that deleting a turn or an owner takes its vectors without Django reading them. Where the
extension cannot be created (not installed on the server, no right to create it, SQLite), the
migration still applies: the table is missing, ``memory.W016`` says so, and search stays
textual. ``manage.py memory_embed --setup`` runs ``vectors_setup`` again once pgvector is there.
"""

from django.db import migrations, models

import memory.models

# NOTE: the vector has no fixed length: each row's ``model`` names its embedder, and only
# vectors of one model are ever compared (memory.recall.vectors). Half precision: half the
# bytes of ``vector``, and its scan measured 15% faster, the ranking the same. The (owner_id, model) index
# serves the exact scan of one owner's vectors, which measured better than an HNSW index for
# one owner's rows (docs/recall.md).
TABLE_SQL = """
CREATE TABLE IF NOT EXISTS memory_turnvector (
  turn_id bigint PRIMARY KEY REFERENCES memory_turn (id) ON DELETE CASCADE,
  owner_id bigint NOT NULL REFERENCES memory_owner (id) ON DELETE CASCADE,
  model varchar(100) NOT NULL,
  vector halfvec NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_turnvector_owner_idx ON memory_turnvector (owner_id, model);
"""


def vectors_setup(schema_editor) -> bool:
    """Create pgvector (where it is installed and the role may) and the vector table; return
    whether the table exists now. Nothing happens on a database other than PostgreSQL."""
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector'),"
            " EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')"
        )
        created, available = cursor.fetchone()
        if not created and not available:
            return False
        if not created:
            try:
                cursor.execute("SAVEPOINT memory_vector_extension")
                cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
                cursor.execute("RELEASE SAVEPOINT memory_vector_extension")
            except Exception:
                # NOTE: no right to create it (not a superuser, not trusted): the migration
                # applies without the table, and memory.W016 tells the operator.
                cursor.execute("ROLLBACK TO SAVEPOINT memory_vector_extension")
                return False
        cursor.execute(TABLE_SQL)
    return True


def _forwards(apps, schema_editor) -> None:
    vectors_setup(schema_editor)


def _backwards(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP TABLE IF EXISTS memory_turnvector")


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0014_fact_expiry_actor"),
    ]

    operations = [
        migrations.AddField(
            model_name="owner",
            name="embedded_seq",
            field=models.BigIntegerField(db_default=0),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="TurnVector",
                    fields=[
                        (
                            "turn",
                            models.OneToOneField(
                                db_constraint=False,
                                on_delete=models.DO_NOTHING,
                                primary_key=True,
                                serialize=False,
                                to="memory.turn",
                            ),
                        ),
                        ("model", models.CharField(max_length=100)),
                        ("vector", memory.models.VectorField()),
                        (
                            "owner",
                            models.ForeignKey(
                                db_constraint=False,
                                db_index=False,
                                on_delete=models.DO_NOTHING,
                                related_name="+",
                                to="memory.owner",
                            ),
                        ),
                    ],
                    options={"default_permissions": ()},
                ),
            ],
            database_operations=[migrations.RunPython(_forwards, _backwards, elidable=False)],
        ),
    ]
