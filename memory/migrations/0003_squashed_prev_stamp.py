"""Since ``0002``, squashed: ``memory_turn_append()`` as ``memory/postgres/sql/turn_append.sql``
writes it now, and the owner's ``prev_stamp``, the stamp it held before its current one, which
the function's ``UPDATE`` sets and returns (the stamp it replaced, also after waiting for another
writer's lock). It stands in for ``0003_turn_append_by_version``, which landed, and ``replaces``
the development migration ``0004_owner_prev_stamp``, which did not.

Backwards leaves both as they are, as ``0003`` left its function: the column has a database
default and nothing before this migration names it, and the function then keeps working; going
forward again adds the column only where it is missing.
"""

from __future__ import annotations

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from memory.postgres import sql


def _column_add(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    owner = apps.get_model("memory", "Owner")
    table = owner._meta.db_table
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        columns = {c.name for c in connection.introspection.get_table_description(cursor, table)}
    if "prev_stamp" in columns:
        return
    field = models.BigIntegerField(db_default=0)
    field.set_attributes_from_name("prev_stamp")
    field.model = owner
    schema_editor.add_field(owner, field)


def _append_forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    sql.turn_append_create(schema_editor)


class Migration(migrations.Migration):
    # NOTE: not 0003_turn_append_by_version: a database that applied it alone would hold this
    # squash partly applied, which Django leaves out of its plan, so the column would never be
    # added. Run there, both operations find what is missing and add only that.
    replaces = [("memory", "0004_owner_prev_stamp")]

    dependencies = [("memory", "0002_squashed_since_0_1_0")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="owner",
                    name="prev_stamp",
                    field=models.BigIntegerField(db_default=0),
                ),
            ],
            database_operations=[
                migrations.RunPython(_column_add, migrations.RunPython.noop, elidable=True),
            ],
        ),
        migrations.RunPython(_append_forwards, migrations.RunPython.noop, elidable=True),
    ]
