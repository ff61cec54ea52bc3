"""``memory_turn_append()`` (PostgreSQL only): the whole of an append in one call, so that
``services.turn_append`` costs one round trip, with or without an idempotency key, with or
without facts, and the server plans its statements once per connection instead of once per
append (a PL/pgSQL function keeps the plans of its statements; a statement sent by Django's
client-side binding is parsed and planned every time, which was a third of an append).

In the owner's transaction, under the owner's row lock (taken first, so that ``seq`` is 1..N
in commit order, and so that a retry of an idempotency key in flight waits for it and then
finds its turn):

1. the turn first stored under ``p_key``, if any: returned with ``created`` false, nothing
   written;
2. else, when ``p_facts`` is given and a fact it names is no longer what the caller read before
   the lock (``had``/``was``, see below): ``conflict`` true, nothing written; the caller runs
   the general path, which merges under the lock;
3. else a new stamp and seq (``cache.stamp_take``'s bump, dirty when ``p_dirty``), the session
   touched, the turn inserted, its ``memory_pendingextraction`` record when ``p_defer``, and
   each fact of ``p_facts`` written with its history row (``services._fact_write``'s rules: a
   new key continues the version count of a deleted one; a new key past ``p_max_facts`` held
   is skipped and named in ``skipped``).

``p_facts`` is a JSON array of ``{"key", "value", "had", "was"}``: the merged new value of a
key, whether the owner held the key when the caller read it, and its value then.
An owner that does not exist yet is created first (as ``Owner.objects.get_or_create``).

Not a model's: the services are its only callers, and a later change of these tables must
replace the function in the same migration (tests/test_turn_append_function.py checks its
fact writes against the rules of ``services._fact_write``: versions after a delete, list
merges, the cap, a fact changed before the lock).
"""

from __future__ import annotations

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION memory_turn_append(
  p_owner text, p_session text, p_role text, p_content text, p_metadata jsonb, p_key text,
  p_dirty boolean, p_at timestamptz, p_defer boolean, p_facts jsonb, p_max_facts integer,
  OUT created boolean, OUT conflict boolean, OUT turn_id bigint, OUT owner_pk bigint,
  OUT seq bigint, OUT stamp bigint, OUT prev_stamp bigint, OUT session_id text, OUT role text,
  OUT content text, OUT metadata text, OUT created_at timestamptz, OUT pending_id bigint,
  OUT facts text, OUT skipped text[])
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  v_fact jsonb;
  v_fact_id bigint;
  v_version integer;
  v_value jsonb;
  v_held integer;
  v_written jsonb := '[]'::jsonb;
BEGIN
  SELECT o.id, o.stamp INTO owner_pk, prev_stamp
  FROM memory_owner AS o WHERE o.external_id = p_owner FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO memory_owner AS o
      (external_id, last_seq, stamp, cache_dirty, created_at, updated_at)
    VALUES (p_owner, 0, 0, false, p_at, p_at) ON CONFLICT (external_id) DO NOTHING;
    SELECT o.id, o.stamp INTO STRICT owner_pk, prev_stamp
    FROM memory_owner AS o WHERE o.external_id = p_owner FOR UPDATE;
  END IF;
  IF p_key IS NOT NULL THEN
    SELECT t.id, t.seq, t.session_id, t.role, t.content, t.metadata::text, t.created_at
    INTO turn_id, seq, session_id, role, content, metadata, created_at
    FROM memory_turn AS t WHERE t.owner_id = owner_pk AND t.idempotency_key = p_key;
    IF FOUND THEN
      created := false;
      conflict := false;
      prev_stamp := NULL;
      RETURN NEXT;
      RETURN;
    END IF;
  END IF;
  IF p_facts IS NOT NULL THEN
    FOR v_fact IN SELECT * FROM jsonb_array_elements(p_facts) LOOP
      SELECT f.value INTO v_value
      FROM memory_fact AS f WHERE f.owner_id = owner_pk AND f.key = v_fact->>'key';
      IF FOUND IS DISTINCT FROM (v_fact->'had')::boolean
         OR (FOUND AND v_value IS DISTINCT FROM v_fact->'was') THEN
        conflict := true;
        created := false;
        RETURN NEXT;
        RETURN;
      END IF;
    END LOOP;
  END IF;
  UPDATE memory_owner AS o SET stamp = nextval('memory_stamp_seq'), last_seq = o.last_seq + 1,
    cache_dirty = o.cache_dirty OR p_dirty, updated_at = statement_timestamp()
  WHERE o.id = owner_pk RETURNING o.last_seq, o.stamp INTO seq, stamp;
  INSERT INTO memory_session AS s (owner_id, session_id, first_seen, last_seen, turn_count)
  VALUES (owner_pk, p_session, p_at, p_at, 1)
  ON CONFLICT ON CONSTRAINT memory_session_owner_sid_uniq
  DO UPDATE SET last_seen = EXCLUDED.last_seen, turn_count = s.turn_count + 1;
  INSERT INTO memory_turn AS t
    (owner_id, seq, session_id, role, content, metadata, idempotency_key, created_at)
  VALUES (owner_pk, seq, p_session, p_role, p_content, p_metadata, p_key, p_at)
  RETURNING t.id INTO turn_id;
  IF p_defer THEN
    INSERT INTO memory_pendingextraction AS e (turn_id, created_at, enqueued_at)
    VALUES (turn_id, p_at, p_at) RETURNING e.id INTO pending_id;
  END IF;
  IF p_facts IS NOT NULL THEN
    skipped := '{}';
    FOR v_fact IN SELECT * FROM jsonb_array_elements(p_facts) LOOP
      IF (v_fact->'had')::boolean THEN
        UPDATE memory_fact AS f SET value = v_fact->'value', version = f.version + 1,
          session_id = p_session, source_turn_seq = seq, updated_at = p_at
        WHERE f.owner_id = owner_pk AND f.key = v_fact->>'key'
        RETURNING f.id, f.version INTO v_fact_id, v_version;
      ELSE
        IF v_held IS NULL THEN
          SELECT count(*) INTO v_held FROM memory_fact AS f WHERE f.owner_id = owner_pk;
        END IF;
        IF v_held >= p_max_facts THEN
          skipped := skipped || (v_fact->>'key');
          CONTINUE;
        END IF;
        SELECT coalesce(max(h.version), 0) + 1 INTO v_version
        FROM memory_factversion AS h WHERE h.owner_id = owner_pk AND h.key = v_fact->>'key';
        INSERT INTO memory_fact AS f
          (owner_id, key, value, version, session_id, source_turn_seq, updated_at)
        VALUES (owner_pk, v_fact->>'key', v_fact->'value', v_version, p_session, seq, p_at)
        RETURNING f.id INTO v_fact_id;
        v_held := v_held + 1;
      END IF;
      INSERT INTO memory_factversion AS h
        (owner_id, key, value, version, session_id, source_turn_seq, deleted, updated_at)
      VALUES (owner_pk, v_fact->>'key', v_fact->'value', v_version, p_session, seq, false, p_at);
      v_written := v_written || jsonb_build_object(
        'id', v_fact_id, 'key', v_fact->>'key', 'value', v_fact->'value', 'version', v_version);
    END LOOP;
    facts := v_written::text;
  END IF;
  created := true;
  conflict := false;
  RETURN NEXT;
END
$$
"""

SIGNATURE = (
    "memory_turn_append(text, text, text, text, jsonb, text, boolean, timestamptz, boolean,"
    " jsonb, integer)"
)


def create_function(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FUNCTION, params=None)


def drop_function(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}", params=None)


class Migration(migrations.Migration):
    dependencies = [("memory", "0007_search_words")]

    operations = [migrations.RunPython(create_function, drop_function, elidable=False)]
