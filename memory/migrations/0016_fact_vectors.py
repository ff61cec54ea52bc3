"""Search by meaning over facts: ``memory_factvector`` where the database holds vectors.

As 0015's table of the turns' vectors, and only where pgvector is there: created where the
extension exists (0015 created it where it could), with keys that cascade in the database (a
deleted fact or owner takes its vector along). Elsewhere the migration applies without the
table, and the store's search ranks facts by their words. ``manage.py memory_embed --setup``
runs ``fact_vectors_setup`` again once pgvector is installed.
"""

from django.db import migrations, models

import memory.models

TABLE_SQL = """
CREATE TABLE IF NOT EXISTS memory_factvector (
  fact_id bigint PRIMARY KEY REFERENCES memory_fact (id) ON DELETE CASCADE,
  owner_id bigint NOT NULL REFERENCES memory_owner (id) ON DELETE CASCADE,
  model varchar(100) NOT NULL,
  version integer NOT NULL,
  vector halfvec NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_factvector_owner_idx ON memory_factvector (owner_id, model);
"""


def fact_vectors_setup(schema_editor) -> bool:
    """Create the facts' vector table where pgvector is created in the database; return
    whether it exists now. Nothing happens on a database other than PostgreSQL."""
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')")
        if not cursor.fetchone()[0]:
            return False
        cursor.execute(TABLE_SQL)
    return True


def _forwards(apps, schema_editor) -> None:
    fact_vectors_setup(schema_editor)


def _backwards(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP TABLE IF EXISTS memory_factvector")


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0015_turn_vectors"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="FactVector",
                    fields=[
                        (
                            "fact",
                            models.OneToOneField(
                                db_constraint=False,
                                on_delete=models.DO_NOTHING,
                                primary_key=True,
                                serialize=False,
                                to="memory.fact",
                            ),
                        ),
                        ("model", models.CharField(max_length=100)),
                        ("version", models.PositiveIntegerField()),
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
