CREATE TABLE IF NOT EXISTS memory_turnvector (
  turn_id bigint PRIMARY KEY REFERENCES memory_turn (id) ON DELETE CASCADE,
  owner_id bigint NOT NULL REFERENCES memory_owner (id) ON DELETE CASCADE,
  model varchar(100) NOT NULL,
  vector halfvec NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_turnvector_owner_idx ON memory_turnvector (owner_id, model);
