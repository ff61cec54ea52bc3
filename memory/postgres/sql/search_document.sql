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
