"""``memory_turn_append()`` finds the owner's row it updates by the version its snapshot read
(``ctid``), not by a second index scan: the same answers, one index lookup fewer per append
(``memory/postgres/sql/turn_append.sql``). A database migrated since reads the file in ``0002``."""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from memory.postgres import sql


def _append_forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    sql.turn_append_create(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("memory", "0002_squashed_since_0_1_0")]

    # NOTE: backwards leaves the function as it is: it answers as the one it replaced.
    operations = [migrations.RunPython(_append_forwards, migrations.RunPython.noop, elidable=True)]
