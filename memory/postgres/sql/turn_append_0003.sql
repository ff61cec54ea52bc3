-- memory_turn_append() as migration 0003 left it, kept for migration 0004's way back: restored
-- before memory_owner.prev_stamp, which the current function (turn_append.sql) sets, goes.
CREATE OR REPLACE FUNCTION memory_turn_append(
  p_owner text, p_session text, p_role text, p_content text, p_metadata jsonb, p_key text,
  p_dirty boolean, p_at timestamptz, p_defer boolean, p_facts jsonb, p_max_facts integer,
  p_tokens integer, p_summary_after integer,
  OUT created boolean, OUT conflict boolean, OUT turn_id bigint, OUT owner_pk bigint,
  OUT seq bigint, OUT stamp bigint, OUT prev_stamp bigint, OUT session_id text, OUT role text,
  OUT content text, OUT metadata text, OUT created_at timestamptz, OUT pending_id bigint,
  OUT facts text, OUT skipped text[], OUT summary_pending_id bigint)
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
  v_tokens bigint;
BEGIN
  IF p_key IS NULL AND p_facts IS NULL THEN
    -- NOTE: nothing to check under the owner's lock first: the UPDATE takes it, with no lock
    -- record of its own before it. It takes the seq only if the stamp it finds locked is the
    -- one its snapshot read (a write that committed in between fails the test on the row's
    -- newest version), so the stamp it returns as taken before is the one it replaced; else
    -- nothing is written and the general path below runs. The row is found again by the
    -- version its snapshot read (ctid), not by a second index scan: the stamp test alone
    -- decides, as before.
    UPDATE memory_owner AS o SET stamp = nextval('memory_stamp_seq'), last_seq = o.last_seq + 1,
      cache_dirty = o.cache_dirty OR p_dirty, updated_at = statement_timestamp(),
      summary_tokens = o.summary_tokens + p_tokens
    FROM (SELECT w.ctid AS version, w.stamp FROM memory_owner AS w WHERE w.external_id = p_owner)
      AS was
    WHERE o.ctid = was.version AND o.stamp = was.stamp
    RETURNING o.id, was.stamp, o.last_seq, o.stamp, o.summary_tokens
    INTO owner_pk, prev_stamp, seq, stamp, v_tokens;
  END IF;
  IF owner_pk IS NULL THEN
    SELECT o.id, o.stamp INTO owner_pk, prev_stamp
    FROM memory_owner AS o WHERE o.external_id = p_owner FOR UPDATE;
    IF NOT FOUND THEN
      INSERT INTO memory_owner AS o
        (external_id, last_seq, stamp, cache_dirty, summary_tokens, created_at, updated_at)
      VALUES (p_owner, 0, 0, false, 0, p_at, p_at) ON CONFLICT (external_id) DO NOTHING;
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
        FROM memory_fact AS f WHERE f.owner_id = owner_pk AND f.key = v_fact->>'key'
          AND (f.expires_at IS NULL OR f.expires_at > p_at);
        IF FOUND IS DISTINCT FROM (v_fact->'had')::boolean
           OR (FOUND AND v_value::text IS DISTINCT FROM (v_fact->'was')::text) THEN
          conflict := true;
          created := false;
          RETURN NEXT;
          RETURN;
        END IF;
      END LOOP;
    END IF;
    UPDATE memory_owner AS o SET stamp = nextval('memory_stamp_seq'), last_seq = o.last_seq + 1,
      cache_dirty = o.cache_dirty OR p_dirty, updated_at = statement_timestamp(),
      summary_tokens = o.summary_tokens + p_tokens
    WHERE o.id = owner_pk
    RETURNING o.last_seq, o.stamp, o.summary_tokens INTO seq, stamp, v_tokens;
  END IF;
  -- NOTE: an UPDATE finds the session nearly always; the INSERT's conflict path would lock
  -- the row with a record of its own before updating it.
  UPDATE memory_session AS s SET last_seen = p_at, turn_count = s.turn_count + 1
  WHERE s.owner_id = owner_pk AND s.session_id = p_session;
  IF NOT FOUND THEN
    INSERT INTO memory_session AS s (owner_id, session_id, first_seen, last_seen, turn_count)
    VALUES (owner_pk, p_session, p_at, p_at, 1)
    ON CONFLICT ON CONSTRAINT memory_session_owner_sid_uniq
    DO UPDATE SET last_seen = EXCLUDED.last_seen, turn_count = s.turn_count + 1;
  END IF;
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
          session_id = p_session, source_turn_seq = seq, updated_at = p_at, expires_at = NULL
        WHERE f.owner_id = owner_pk AND f.key = v_fact->>'key'
        RETURNING f.id, f.version INTO v_fact_id, v_version;
      ELSE
        IF v_held IS NULL THEN
          SELECT count(*) INTO v_held FROM memory_fact AS f WHERE f.owner_id = owner_pk
            AND (f.expires_at IS NULL OR f.expires_at > p_at);
        END IF;
        IF v_held >= p_max_facts THEN
          skipped := skipped || (v_fact->>'key');
          CONTINUE;
        END IF;
        SELECT coalesce(max(h.version), 0) + 1 INTO v_version
        FROM memory_factversion AS h WHERE h.owner_id = owner_pk AND h.key = v_fact->>'key';
        INSERT INTO memory_fact AS f
          (owner_id, key, value, version, session_id, source_turn_seq, updated_at, expires_at)
        VALUES (owner_pk, v_fact->>'key', v_fact->'value', v_version, p_session, seq, p_at, NULL)
        ON CONFLICT ON CONSTRAINT memory_fact_owner_key_uniq DO UPDATE SET
          value = EXCLUDED.value, version = EXCLUDED.version, session_id = EXCLUDED.session_id,
          source_turn_seq = EXCLUDED.source_turn_seq, updated_at = EXCLUDED.updated_at,
          expires_at = NULL
        RETURNING f.id INTO v_fact_id;
        v_held := v_held + 1;
      END IF;
      INSERT INTO memory_factversion AS h
        (owner_id, key, value, version, session_id, source_turn_seq, deleted, updated_at, actor)
      VALUES (owner_pk, v_fact->>'key', v_fact->'value', v_version, p_session, seq, false, p_at,
        'extractor');
      v_written := v_written || jsonb_build_object(
        'id', v_fact_id, 'key', v_fact->>'key', 'value', v_fact->'value', 'version', v_version);
    END LOOP;
    facts := v_written::text;
  END IF;
  IF p_summary_after IS NOT NULL AND v_tokens >= p_summary_after THEN
    INSERT INTO memory_pendingsummary AS p (owner_id, created_at, enqueued_at)
    VALUES (owner_pk, p_at, p_at) ON CONFLICT (owner_id) DO NOTHING
    RETURNING p.id INTO summary_pending_id;
  END IF;
  created := true;
  conflict := false;
  RETURN NEXT;
END
$$
