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
