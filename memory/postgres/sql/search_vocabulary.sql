CREATE OR REPLACE FUNCTION memory_search_keys(word text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN array_prepend(word, ARRAY(
  SELECT DISTINCT overlay(word PLACING '' FROM i FOR 1)
  FROM generate_series(1, char_length(word)) AS i
  WHERE char_length(word) >= 4));

CREATE TABLE memory_searchword (
  owner_id bigint NOT NULL,
  key text COLLATE "C" NOT NULL,
  word text COLLATE "C" NOT NULL,
  CONSTRAINT memory_searchword_pk PRIMARY KEY (owner_id, key, word)
);

CREATE OR REPLACE FUNCTION memory_searchword_add() RETURNS trigger LANGUAGE plpgsql AS $$
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
$$;

CREATE OR REPLACE FUNCTION memory_searchword_forget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM memory_searchword AS w USING gone AS o WHERE w.owner_id = o.id;
  RETURN NULL;
END
$$;

CREATE TRIGGER memory_turn_searchword_insert AFTER INSERT ON memory_turn
  REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION memory_searchword_add();

CREATE TRIGGER memory_turn_searchword_update AFTER UPDATE ON memory_turn
  REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION memory_searchword_add();

CREATE TRIGGER memory_owner_searchword_delete AFTER DELETE ON memory_owner
  REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION memory_searchword_forget();
