"""The database-wide sequence that stamps every change of an owner (PostgreSQL only)."""

from __future__ import annotations

from django.db import migrations


def create_sequence(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("CREATE SEQUENCE IF NOT EXISTS memory_stamp_seq")


def drop_sequence(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP SEQUENCE IF EXISTS memory_stamp_seq")


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [migrations.RunPython(create_sequence, drop_sequence, elidable=False)]
