"""The owners' search vocabulary (PostgreSQL only): ``memory_searchword``, each distinct word of
an owner's turns under itself and under every spelling one letter shorter, kept by triggers.

The typo-tolerant fallback of ``memory/search.py`` looks each word of a query up here, by the
owner and a key in a B-tree, instead of comparing it with the text of every turn: a word with
one letter dropped, added, changed or two swapped shares a key with the word meant (the
"symmetric delete" of SymSpell: ``basktball`` is a key of ``basketball``; ``memroy`` and
``memory`` share ``memry``), and the start of a word is a range of keys. The turns are then
found through 0003's document index.

``memory_search_words(content)`` reads the words as 0003's document reads the English ones
(NFKC, CJK runs left out) but neither stemmed nor with stop words dropped: a typo is like the
word as written. Words of 4-32 characters get their shorter keys (``memory_search_keys``);
longer ones are not kept. Statement-level triggers add the new words of inserted and updated
turns (a bulk insert or ``COPY`` in one statement; a word already known costs one probe), and
deleting an owner deletes its words, so a forgotten owner leaves none. A word of a turn
deleted on its own stays until the owner goes: it can only widen the candidates of a typo,
never the turns found, which must still match the document. The content's trigram index of
0003 goes: nothing reads it any more, and every insert paid for it.

Not a model, for the reasons of 0003: SQLite has none of this, and no Python code reads or
writes a row of it but the search's one statement.
"""

from __future__ import annotations

from django.db import migrations

# NOTE: the CJK ranges of 0003's memory_search_document(): its characters and pairs match as
# written, never as similar words, so they stay out of the vocabulary.
CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"

WORDS_FUNCTION = r"""
CREATE OR REPLACE FUNCTION memory_search_words(content text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
BEGIN
  IF octet_length(content) = char_length(content) THEN
    RETURN tsvector_to_array(to_tsvector('pg_catalog.simple', content));
  END IF;
  RETURN tsvector_to_array(to_tsvector('pg_catalog.simple',
    regexp_replace(normalize(content, NFKC), '[{cjk}]+', ' ', 'g')));
END
$$
""".replace("{cjk}", CJK)

# NOTE: as 0003's document on a database that is not UTF8: English words only.
ASCII_WORDS_FUNCTION = """
CREATE OR REPLACE FUNCTION memory_search_words(content text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN tsvector_to_array(to_tsvector('pg_catalog.simple', content))
"""

FORWARDS = [
    # The word itself, then (from 4 characters) each spelling with one character left out.
    """
CREATE OR REPLACE FUNCTION memory_search_keys(word text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN array_prepend(word, ARRAY(
  SELECT DISTINCT overlay(word PLACING '' FROM i FOR 1)
  FROM generate_series(1, char_length(word)) AS i
  WHERE char_length(word) >= 4))
""",
    'CREATE TABLE memory_searchword (owner_id bigint NOT NULL, key text COLLATE "C" NOT NULL,'
    ' word text COLLATE "C" NOT NULL,'
    " CONSTRAINT memory_searchword_pk PRIMARY KEY (owner_id, key, word))",
    """
CREATE FUNCTION memory_searchword_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO memory_searchword (owner_id, key, word)
  SELECT n.owner_id, k.key, n.word
  FROM (
    SELECT DISTINCT t.owner_id, w.word
    FROM added AS t, unnest(memory_search_words(t.content)) AS w(word)
    WHERE char_length(w.word) <= 32
  ) AS n
  CROSS JOIN LATERAL unnest(memory_search_keys(n.word)) AS k(key)
  WHERE NOT EXISTS (
    SELECT FROM memory_searchword AS s
    WHERE s.owner_id = n.owner_id AND s.key = n.word AND s.word = n.word)
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END
$$
""",
    """
CREATE FUNCTION memory_searchword_forget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM memory_searchword AS w USING gone AS o WHERE w.owner_id = o.id;
  RETURN NULL;
END
$$
""",
    "CREATE TRIGGER memory_turn_searchword_insert AFTER INSERT ON memory_turn"
    " REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memory_searchword_add()",
    "CREATE TRIGGER memory_turn_searchword_update AFTER UPDATE ON memory_turn"
    " REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memory_searchword_add()",
    "CREATE TRIGGER memory_owner_searchword_delete AFTER DELETE ON memory_owner"
    " REFERENCING OLD TABLE AS gone FOR EACH STATEMENT"
    " EXECUTE FUNCTION memory_searchword_forget()",
    "DROP INDEX IF EXISTS memory_turn_trgm_idx",
    # The turns there already.
    "INSERT INTO memory_searchword (owner_id, key, word)"
    " SELECT n.owner_id, k.key, n.word FROM ("
    "   SELECT DISTINCT t.owner_id, w.word FROM memory_turn AS t,"
    "   unnest(memory_search_words(t.content)) AS w(word) WHERE char_length(w.word) <= 32"
    " ) AS n CROSS JOIN LATERAL unnest(memory_search_keys(n.word)) AS k(key)"
    " ON CONFLICT DO NOTHING",
    "ANALYZE memory_searchword",
]

BACKWARDS = [
    "CREATE INDEX IF NOT EXISTS memory_turn_trgm_idx ON memory_turn"
    " USING gin (owner_id, content gin_trgm_ops)",
    "DROP TRIGGER IF EXISTS memory_owner_searchword_delete ON memory_owner",
    "DROP TRIGGER IF EXISTS memory_turn_searchword_update ON memory_turn",
    "DROP TRIGGER IF EXISTS memory_turn_searchword_insert ON memory_turn",
    "DROP FUNCTION IF EXISTS memory_searchword_forget()",
    "DROP FUNCTION IF EXISTS memory_searchword_add()",
    "DROP TABLE IF EXISTS memory_searchword",
    "DROP FUNCTION IF EXISTS memory_search_keys(text)",
    "DROP FUNCTION IF EXISTS memory_search_words(text)",
]


def create_words(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SHOW server_encoding")
        (encoding,) = cursor.fetchone()
    utf8 = encoding.upper() in ("UTF8", "UTF-8")
    for sql in [WORDS_FUNCTION if utf8 else ASCII_WORDS_FUNCTION, *FORWARDS]:
        schema_editor.execute(sql, params=None)


def drop_words(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for sql in BACKWARDS:
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [("memory", "0006_session_page_index")]

    operations = [migrations.RunPython(create_words, drop_words, elidable=False)]
