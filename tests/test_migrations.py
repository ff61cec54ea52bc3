"""Tests of the app's migrations on Postgres: the schema 0.1.0 shipped (``0001``), everything
since (``0002``) and the append's function with the owner's previous stamp (``0003``). A
database of 0.1.0 migrates to the schema a new one gets, with its data; the functions in the
database are the ``memory/postgres/sql`` files; migrating back to 0.1.0 restores its indexes,
and forward drops them again; back to ``0002``, appends keep working, and forward again
changes nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from memory.models import Owner
from memory.postgres import sql

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
RELEASE_0_1_0 = Path(__file__).resolve().parent / "data" / "memory-0.1.0.sql"

BEFORE = ("memory", "0001_squashed_0_1_0")
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


def function_body(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = %s", [name])
        (source,) = cursor.fetchone()
    return str(source)


def file_body(text: str, name: str) -> str:
    """The body of function ``name`` as a ``.sql`` file writes it (between its ``$$``)."""
    start = text.index(f"FUNCTION {name}(")
    match = re.compile(r"\$\$(.*?)\$\$", re.S).search(text, start)
    assert match is not None
    return match.group(1)


def test_the_app_starts_with_the_two_squashed_migrations_of_its_history():
    names = sorted(p.name for p in (ROOT / "memory" / "migrations").glob("0*.py"))
    assert names == [
        "0001_squashed_0_1_0.py",
        "0002_squashed_since_0_1_0.py",
        "0003_squashed_prev_stamp.py",
    ]


@pytest.mark.parametrize(
    ("squash", "replaced"),
    [
        (
            ("memory", "0002_squashed_since_0_1_0"),
            ["0002_since_0_1_0", "0003_langgraph", "0004_turn_append_owner_update"],
        ),
        (
            ("memory", "0003_squashed_prev_stamp"),
            ["0003_turn_append_by_version", "0004_owner_prev_stamp"],
        ),
    ],
)
def test_a_database_at_the_heads_the_squash_replaced_has_nothing_left_to_migrate(
    squash: tuple[str, str], replaced: list[str]
):
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM django_migrations WHERE app = 'memory' AND name = %s", [squash[1]]
            )
            for name in replaced:
                cursor.execute(
                    "INSERT INTO django_migrations (app, name, applied)"
                    " SELECT 'memory', %s, now() WHERE NOT EXISTS"
                    " (SELECT 1 FROM django_migrations WHERE app = 'memory' AND name = %s)",
                    [name, name],
                )
        executor = MigrationExecutor(connection)
        assert squash in executor.loader.applied_migrations
        assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []
        transaction.set_rollback(True)


def test_a_database_at_the_landed_0003_alone_gets_the_column_and_the_function():
    """``0003_turn_append_by_version`` landed before the squash; the ``0004`` replaced did not."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM django_migrations WHERE app = 'memory'"
                " AND name IN ('0003_squashed_prev_stamp', '0004_owner_prev_stamp')"
            )
            cursor.execute(
                "INSERT INTO django_migrations (app, name, applied)"
                " SELECT 'memory', '0003_turn_append_by_version', now() WHERE NOT EXISTS"
                " (SELECT 1 FROM django_migrations WHERE app = 'memory'"
                " AND name = '0003_turn_append_by_version')"
            )
            cursor.execute("ALTER TABLE memory_owner DROP COLUMN prev_stamp")
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        assert [migration.name for migration, _ in plan] == ["0003_squashed_prev_stamp"]
    finally:
        migrate_to_latest()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_default FROM information_schema.columns"
            " WHERE table_name = 'memory_owner' AND column_name = 'prev_stamp'"
        )
        assert cursor.fetchall() == [("0",)]
    assert function_body("memory_turn_append") == file_body(
        sql.sql_read("turn_append"), "memory_turn_append"
    )


@pytest.mark.parametrize(
    ("name", "file"),
    [
        ("memory_turn_append", "turn_append"),
        ("memory_search_document", "search_document"),
        ("memory_search_words", "search_words"),
        ("memory_searchword_add", "search_vocabulary"),
        ("memory_searchword_forget", "search_vocabulary"),
    ],
)
def test_each_function_in_the_database_is_the_one_in_its_file(name, file):
    assert function_body(name) == file_body(sql.sql_read(file), name)


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


def test_migrating_back_to_0_1_0_restores_its_indexes_and_forward_drops_them_again():
    try:
        migrate(BEFORE)
        found = indexes()
        assert found >= DROPPED | {"memory_turn_trgm_idx"}
        assert "memory_owner_external_id_key" in found
        assert "memory_owner_external_id_uniq" not in found
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_proc WHERE proname = 'memory_turn_append'")
            assert cursor.fetchone() == (0,)
    finally:
        migrate_to_latest()
    found = indexes()
    assert not DROPPED & found
    assert "memory_owner_external_id_uniq" in found
    assert function_body("memory_turn_append") == file_body(
        sql.sql_read("turn_append"), "memory_turn_append"
    )


def test_migrating_back_to_0002_keeps_appends_working_and_forward_again_changes_nothing():
    def appended() -> tuple[bool, int]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT created, seq FROM memory_turn_append('wang', 's', 'user', 'x', '{}',"
                " NULL, false, now(), false, NULL, 200, 0, NULL)"
            )
            created, seq = cursor.fetchone()
        return created, seq

    try:
        migrate(("memory", "0002_squashed_since_0_1_0"))
        assert [appended(), appended()] == [(True, 1), (True, 2)]
    finally:
        migrate_to_latest()
    assert function_body("memory_turn_append") == file_body(
        sql.sql_read("turn_append"), "memory_turn_append"
    )
    assert appended() == (True, 3)
    owner = Owner.objects.get(external_id="wang")
    assert owner.prev_stamp < owner.stamp


# A database of its own, made from a dump and migrated by ``manage.py migrate``.


def _admin_params() -> dict[str, object]:
    settings = connection.settings_dict
    return {
        "host": settings["HOST"] or None,
        "port": settings["PORT"] or None,
        "user": settings["USER"] or None,
        "password": settings["PASSWORD"] or None,
        "dbname": "postgres",
        "autocommit": True,
    }


def _url(name: str) -> str:
    settings = connection.settings_dict
    auth = settings["USER"] or ""
    if settings["PASSWORD"]:
        auth += f":{settings['PASSWORD']}"
    host = settings["HOST"] or "localhost"
    port = settings["PORT"] or 5432
    return f"postgres://{auth}@{host}:{port}/{name}"


@pytest.fixture
def scratch_databases() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    with psycopg.connect(**_admin_params()) as admin:  # type: ignore[arg-type]
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _database(names: list[str], *, load: Path | None = None) -> str:
    name = f"memory_mig_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(**_admin_params()) as admin:  # type: ignore[arg-type]
        admin.execute(f'CREATE DATABASE "{name}"')
    names.append(name)
    if load is not None:
        params = {**_admin_params(), "dbname": name}
        with psycopg.connect(**params) as db:  # type: ignore[arg-type]
            db.execute(load.read_text(encoding="utf-8"))  # type: ignore[arg-type]
    env = {
        **os.environ,
        "DATABASE_URL": _url(name),
        "DJANGO_SETTINGS_MODULE": "memoryproj.settings",
        "DJANGO_DEBUG": "1",
    }
    env.pop("REDIS_URL", None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    return name


_SCHEMA_QUERIES = {
    "columns": """SELECT table_name, column_name, data_type, is_nullable, column_default,
        generation_expression FROM information_schema.columns WHERE table_schema = 'public'""",
    "indexes": "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = 'public'",
    "constraints": """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
        FROM pg_constraint WHERE connamespace = 'public'::regnamespace""",
    "functions": """SELECT proname, pg_get_function_arguments(oid), prosrc FROM pg_proc
        WHERE pronamespace = 'public'::regnamespace AND proname LIKE 'memory%%'""",
    "triggers": "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal",
    "sequences": "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'",
}


def _normal(value: object) -> object:
    # NOTE: a dump's reload writes a CHECK's array with its casts elsewhere; the same rule.
    if isinstance(value, str):
        return re.sub(r"[()\s]|::[a-z ]+(\[\])?", "", value)
    return value


def schema(name: str) -> dict[str, set[tuple[object, ...]]]:
    params = {**_admin_params(), "dbname": name}
    with psycopg.connect(**params) as db:  # type: ignore[arg-type]
        return {
            kind: {tuple(_normal(v) for v in row) for row in db.execute(query).fetchall()}  # type: ignore[arg-type]
            for kind, query in _SCHEMA_QUERIES.items()
        }


@pytest.mark.slow
def test_a_database_of_0_1_0_migrates_to_the_schema_of_a_new_one_and_keeps_its_memory(
    scratch_databases,
):
    new = _database(scratch_databases)
    upgraded = _database(scratch_databases, load=RELEASE_0_1_0)
    assert schema(upgraded) == schema(new)

    params = {**_admin_params(), "dbname": upgraded}
    with psycopg.connect(**params) as db:  # type: ignore[arg-type]
        rows = db.execute("SELECT name FROM django_migrations WHERE app = 'memory'")
        applied = {name for (name,) in rows}
        assert {"0001_squashed_0_1_0", "0002_squashed_since_0_1_0"} <= applied
        turns = db.execute(
            "SELECT t.seq, t.content FROM memory_turn t JOIN memory_owner o ON o.id = t.owner_id"
            " WHERE o.external_id = 'wang' ORDER BY t.seq"
        ).fetchall()
        assert [seq for seq, _ in turns] == [1, 2, 3]
        assert turns[2][1] == "我住在上海"
        # The vocabulary was filled from the turns already there, and the actor of the old
        # versions is the Python API's.
        words = db.execute("SELECT count(*) FROM memory_searchword WHERE word = 'basketball'")
        assert words.fetchone()[0] >= 1  # type: ignore[index]
        actors = db.execute("SELECT DISTINCT actor FROM memory_factversion").fetchall()
        assert actors == [("python",)]
        found = db.execute(
            "SELECT o.external_id FROM memory_turn t JOIN memory_owner o ON o.id = t.owner_id"
            " WHERE t.search @@ plainto_tsquery('english', 'basketball')"
        ).fetchall()
        assert found == [("wang",)]
