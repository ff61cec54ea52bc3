CREATE OR REPLACE FUNCTION memory_search_document(content text) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN to_tsvector('pg_catalog.english', content)
