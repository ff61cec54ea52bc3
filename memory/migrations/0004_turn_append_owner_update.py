"""``memory_turn_append()`` again (``memory/postgres/sql/turn_append.sql``): an append with
no idempotency key and no facts takes the owner's row lock with its ``UPDATE``, without a
``SELECT ... FOR UPDATE`` before it, and updates the session before it tries to insert one.
The same signature and results; the migration before it left a function the app still calls
the same way, so going back leaves this one."""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from memory.postgres import sql


def _append_forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    sql.turn_append_create(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("memory", "0003_langgraph")]

    operations = [
        migrations.RunPython(_append_forwards, migrations.RunPython.noop, elidable=True),
    ]
