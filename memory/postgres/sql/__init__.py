"""The database functions, triggers and tables of PostgreSQL that are not models: one ``.sql``
file each beside this module, read here (as ``memory/cache/lua/*.lua`` are) and run by the
migrations. Each function here does nothing on another database and says so in its return."""

from __future__ import annotations

from pathlib import Path

from django.db.backends.base.schema import BaseDatabaseSchemaEditor

SQL = Path(__file__).resolve().parent

# NOTE: Han (with extensions A-F and the compatibility block), kana and Hangul syllables: the
# scripts that Lucene's CJK bigram analyser pairs. memory/search.py holds the same ranges.
CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"

TURN_APPEND_SIGNATURE = (
    "memory_turn_append(text, text, text, text, jsonb, text, boolean, timestamptz, boolean,"
    " jsonb, integer, integer, integer)"
)


def sql_read(name: str) -> str:
    """The text of ``<name>.sql``, with ``{cjk}`` replaced by the CJK ranges."""
    return (SQL / f"{name}.sql").read_text(encoding="utf-8").replace("{cjk}", CJK)


def _postgres(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    return schema_editor.connection.vendor == "postgresql"


def _utf8(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SHOW server_encoding")
        (encoding,) = cursor.fetchone()
    return str(encoding).upper() in ("UTF8", "UTF-8")


def search_document_create(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    """``memory_search_document(text)``: CJK characters and pairs need a UTF8 database; any
    other one gets English words only."""
    if not _postgres(schema_editor):
        return False
    name = "search_document" if _utf8(schema_editor) else "search_document_ascii"
    schema_editor.execute(sql_read(name), params=None)
    return True


def search_words_create(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    """``memory_search_words(text)`` and the owners' vocabulary: the table and its triggers."""
    if not _postgres(schema_editor):
        return False
    name = "search_words" if _utf8(schema_editor) else "search_words_ascii"
    schema_editor.execute(sql_read(name), params=None)
    schema_editor.execute(sql_read("search_vocabulary"), params=None)
    return True


def turn_append_create(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    """``memory_turn_append()``, replaced in place when it exists."""
    if not _postgres(schema_editor):
        return False
    schema_editor.execute(sql_read("turn_append"), params=None)
    return True


def vectors_setup(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    """Create pgvector (where it is installed and the role may) and the turns' and facts'
    vector tables; return whether both tables exist now.

    Where the extension cannot be created (not installed on the server, no right to create it,
    not PostgreSQL) nothing is created and the answer is False (``memory.W016``).
    """
    if not _postgres(schema_editor):
        return False
    with schema_editor.connection.cursor() as cursor:
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
                # applies without the tables.
                cursor.execute("ROLLBACK TO SAVEPOINT memory_vector_extension")
                return False
        cursor.execute(sql_read("turn_vectors"))
        cursor.execute(sql_read("fact_vectors"))
    return True
