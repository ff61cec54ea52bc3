"""LangGraph's tables: the checkpointer's checkpoints, channel values and pending writes of
an owner's threads (deleted with the owner), and the store's own vectors of facts
(``StoreVector``), whose key to the fact cascades in the database on PostgreSQL."""

import django.db.models.deletion
from django.db import migrations, models

CASCADE_SQL = """
ALTER TABLE memory_storevector ADD CONSTRAINT memory_storevector_fact_fk
  FOREIGN KEY (fact_id) REFERENCES memory_fact (id) ON DELETE CASCADE;
"""
UNCASCADE_SQL = "ALTER TABLE memory_storevector DROP CONSTRAINT memory_storevector_fact_fk;"


def cascade_add(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CASCADE_SQL)


def cascade_drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNCASCADE_SQL)


class Migration(migrations.Migration):

    dependencies = [
        ("memory", "0002_since_0_1_0"),
    ]

    operations = [
        migrations.CreateModel(
            name='Checkpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('thread_id', models.CharField(max_length=128)),
                ('checkpoint_ns', models.TextField(blank=True, default='')),
                ('checkpoint_id', models.CharField(max_length=128)),
                ('parent_checkpoint_id', models.CharField(blank=True, max_length=128, null=True)),
                ('type', models.CharField(max_length=64)),
                ('checkpoint', models.BinaryField()),
                ('metadata', models.JSONField(default=dict)),
                ('channel_versions', models.JSONField(default=dict)),
                ('created_at', models.DateTimeField()),
                ('owner', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='memory.owner')),
            ],
            options={
                'verbose_name': 'LangGraph checkpoint',
                'default_permissions': ('view',),
                'constraints': [models.UniqueConstraint(fields=('owner', 'thread_id', 'checkpoint_ns', 'checkpoint_id'), name='memory_checkpoint_uniq')],
            },
        ),
        migrations.CreateModel(
            name='CheckpointBlob',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('thread_id', models.CharField(max_length=128)),
                ('checkpoint_ns', models.TextField(blank=True, default='')),
                ('channel', models.TextField()),
                ('version', models.CharField(max_length=128)),
                ('type', models.CharField(max_length=64)),
                ('blob', models.BinaryField(null=True)),
                ('owner', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='memory.owner')),
            ],
            options={
                'default_permissions': (),
                'constraints': [models.UniqueConstraint(fields=('owner', 'thread_id', 'checkpoint_ns', 'channel', 'version'), name='memory_checkpointblob_uniq')],
            },
        ),
        migrations.CreateModel(
            name='CheckpointWrite',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('thread_id', models.CharField(max_length=128)),
                ('checkpoint_ns', models.TextField(blank=True, default='')),
                ('checkpoint_id', models.CharField(max_length=128)),
                ('task_id', models.TextField()),
                ('task_path', models.TextField(blank=True, default='')),
                ('idx', models.IntegerField()),
                ('channel', models.TextField()),
                ('type', models.CharField(max_length=64)),
                ('blob', models.BinaryField()),
                ('owner', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='memory.owner')),
            ],
            options={
                'default_permissions': (),
                'constraints': [models.UniqueConstraint(fields=('owner', 'thread_id', 'checkpoint_ns', 'checkpoint_id', 'task_id', 'idx'), name='memory_checkpointwrite_uniq')],
            },
        ),
        migrations.CreateModel(
            name='StoreVector',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('model', models.CharField(max_length=100)),
                ('path', models.CharField(max_length=200)),
                ('version', models.PositiveIntegerField()),
                ('vector', models.JSONField()),
                ('fact', models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='memory.fact')),
            ],
            options={
                'default_permissions': (),
                'constraints': [models.UniqueConstraint(fields=('fact', 'model', 'path'), name='memory_storevector_uniq')],
            },
        ),
        migrations.RunPython(cascade_add, cascade_drop),
    ]
