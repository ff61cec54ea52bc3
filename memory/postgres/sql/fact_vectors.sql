CREATE TABLE IF NOT EXISTS memory_factvector (
  fact_id bigint PRIMARY KEY REFERENCES memory_fact (id) ON DELETE CASCADE,
  owner_id bigint NOT NULL REFERENCES memory_owner (id) ON DELETE CASCADE,
  model varchar(100) NOT NULL,
  version integer NOT NULL,
  vector halfvec NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_factvector_owner_idx ON memory_factvector (owner_id, model);
