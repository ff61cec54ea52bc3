"""The owner keeps the stamp it held before its current one (``prev_stamp``), set by every
statement that draws a stamp, so that ``memory_turn_append()`` returns the stamp it replaced from
its one ``UPDATE``, also after waiting for another writer's lock, where it took a second, locked
statement before (``memory/postgres/sql/turn_append.sql``)."""

from __future__ import annotations

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from memory.postgres import sql


def _append_forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    sql.turn_append_create(schema_editor)


def _append_backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # NOTE: the function without prev_stamp, as 0003 left it, before the column goes.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(sql.sql_read("turn_append_0003"), params=None)


class Migration(migrations.Migration):
    dependencies = [("memory", "0003_turn_append_by_version")]

    operations = [
        migrations.AddField(
            model_name="owner",
            name="prev_stamp",
            field=models.BigIntegerField(db_default=0),
        ),
        migrations.RunPython(_append_forwards, _append_backwards, elidable=True),
    ]
