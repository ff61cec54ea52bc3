CREATE OR REPLACE FUNCTION memory_search_words(content text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN tsvector_to_array(to_tsvector('pg_catalog.simple', content))
