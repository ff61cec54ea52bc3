"""Tests of migrations 0009 and 0010 on Postgres: the indexes an append rewrote for nothing are
gone, the owner's id stays unique, the append function compares facts as JSON (0010), and
migrating back puts every index and the function where they were."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from memory.models import Owner

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("memory", "0008_turn_append_function")
AFTER = ("memory", "0009_drop_redundant_indexes")
DROPPED = {
    "memory_owner_external_id_c83473d6_like",
    "memory_fact_owner_id_0a661e21",
    "memory_factversion_owner_id_9481254c",
    "memory_session_owner_id_8a052684",
    "memory_turn_owner_id_97ea5acf",
}


def indexes() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename LIKE 'memory\\_%%'")
        return {name for (name,) in cursor.fetchall()}


def migrate(target: tuple[str, str]) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([target])


def migrate_to_latest() -> None:
    """Every migration of the app applied again, as the rest of the suite expects."""
    executor = MigrationExecutor(connection)
    executor.migrate([key for key in executor.loader.graph.leaf_nodes() if key[0] == "memory"])


def test_no_owner_keyed_table_keeps_an_index_of_the_owner_alone():
    found = indexes()
    assert not DROPPED & found
    # NOTE: the lookups by owner that they served, through each table's unique constraint.
    assert {
        "memory_owner_external_id_uniq",
        "memory_fact_owner_key_uniq",
        "memory_factversion_uniq",
        "memory_session_owner_sid_uniq",
        "memory_turn_owner_seq_uniq",
    } <= found


def test_the_owner_id_stays_unique():
    Owner.objects.create(external_id="wang")
    with pytest.raises(IntegrityError), transaction.atomic():
        Owner.objects.create(external_id="wang")
    assert Owner.objects.filter(external_id="wang").count() == 1


def test_migrating_back_restores_every_index_and_forward_drops_them_again():
    try:
        migrate(BEFORE)
        found = indexes()
        assert found >= DROPPED
        assert "memory_owner_external_id_key" in found
        assert "memory_owner_external_id_uniq" not in found
    finally:
        migrate_to_latest()
    found = indexes()
    assert not DROPPED & found
    assert "memory_owner_external_id_uniq" in found


def function_source() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = 'memory_turn_append'")
        (source,) = cursor.fetchone()
    return str(source)


def test_migration_0010_compares_fact_values_as_json_text_and_migrating_back_restores_0008():
    assert "v_value::text IS DISTINCT FROM (v_fact->'was')::text" in function_source()
    try:
        migrate(AFTER)
        assert "v_value IS DISTINCT FROM v_fact->'was'" in function_source()
    finally:
        migrate_to_latest()
    assert "v_value::text IS DISTINCT FROM (v_fact->'was')::text" in function_source()
