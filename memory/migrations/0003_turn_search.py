"""Full-text search of turns (PostgreSQL only): a generated ``search`` column and GIN indexes.

``memory_turn.search`` is a stored generated column, ``memory_search_document(content)``: the
English words of the content (stemmed, stop words dropped) plus, for Chinese, Japanese and
Korean text, every character and every pair of neighbouring characters, which is how a text
without spaces between words becomes searchable. The database computes it on every insert and
update, so bulk inserts and moved rows are indexed with no Python work.

Two GIN indexes lead with ``owner_id`` (``btree_gin``), so that one owner's search is a single
index condition: ``memory_turn_search_idx`` on the document, ``memory_turn_trgm_idx`` on the
content's trigrams (``pg_trgm``) for the typo-tolerant fallback.

The column and the indexes are not model fields or ``Meta.indexes``: SQLite (the demo) has
neither ``tsvector`` nor GIN, and loading a turn never needs its search document. Nothing here
runs on other databases, where searching falls back to a plain substring match.
A later ``AlterField`` of ``Turn.content`` must drop and re-create the column around it: Postgres
does not change the type of a column that a generated column reads.
"""

from __future__ import annotations

from django.contrib.postgres.operations import BtreeGinExtension, TrigramExtension
from django.db import migrations

# NOTE: Han (with extensions A-F and the compatibility block), kana and Hangul syllables: the
# scripts that Lucene's CJK bigram analyser pairs. memory/search.py holds the same ranges.
CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"

DOCUMENT_FUNCTION = r"""
CREATE OR REPLACE FUNCTION memory_search_document(content text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
  normal text;
  cjk text;
BEGIN
  -- Pure ASCII (as many bytes as characters): English words only, nothing to normalise.
  IF octet_length(content) = char_length(content) THEN
    RETURN to_tsvector('pg_catalog.english', content);
  END IF;
  -- NFKC folds full-width letters and digits (typed with a Chinese input method) to ASCII.
  normal := normalize(content, NFKC);
  -- The CJK runs of the text, one space between runs.
  cjk := btrim(regexp_replace(normal, '[^{cjk}]+', ' ', 'g'));
  RETURN to_tsvector('pg_catalog.english', regexp_replace(normal, '[{cjk}]+', ' ', 'g'))
      || to_tsvector('pg_catalog.simple',
           -- every character, then the pairs starting at even and at odd offsets of each run
           regexp_replace(cjk, '(\S)', '\1 ', 'g')
           || regexp_replace(cjk, '(\S\S)', ' \1 ', 'g') || ' '
           || regexp_replace(regexp_replace(cjk, '(^| )\S', '\1', 'g'), '(\S\S)', ' \1 ', 'g'));
END
$$
""".replace("{cjk}", CJK)

# NOTE: CJK characters and NFKC need a UTF8 database; on any other one, English words only.
ASCII_DOCUMENT_FUNCTION = """
CREATE OR REPLACE FUNCTION memory_search_document(content text) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN to_tsvector('pg_catalog.english', content)
"""

FORWARDS = [
    "ALTER TABLE memory_turn ADD COLUMN search tsvector"
    " GENERATED ALWAYS AS (memory_search_document(content)) STORED",
    "CREATE INDEX memory_turn_search_idx ON memory_turn USING gin (owner_id, search)",
    "CREATE INDEX memory_turn_trgm_idx ON memory_turn USING gin (owner_id, content gin_trgm_ops)",
]

BACKWARDS = [
    "DROP INDEX IF EXISTS memory_turn_trgm_idx",
    "DROP INDEX IF EXISTS memory_turn_search_idx",
    "ALTER TABLE memory_turn DROP COLUMN IF EXISTS search",
    "DROP FUNCTION IF EXISTS memory_search_document(text)",
]


def create_search(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SHOW server_encoding")
        (encoding,) = cursor.fetchone()
    utf8 = encoding.upper() in ("UTF8", "UTF-8")
    function = DOCUMENT_FUNCTION if utf8 else ASCII_DOCUMENT_FUNCTION
    for sql in [function, *FORWARDS]:
        schema_editor.execute(sql, params=None)


def drop_search(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for sql in BACKWARDS:
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [("memory", "0002_stamp_sequence")]

    operations = [
        BtreeGinExtension(),
        TrigramExtension(),
        migrations.RunPython(create_search, drop_search, elidable=False),
    ]
