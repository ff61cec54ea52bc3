"""The append's floor: the least work that stores a user turn as the app stores one, written by
hand. One SQL statement on the app's own tables (bump the owner's counter and stamp, touch the
session, insert the turn; the table's triggers and indexes run as for the app), committed, then
one Redis ``EVAL`` that puts the turn's JSON in a hash. No checks, no cache protocol.

The ``append_floor`` row times it in process (``Bench.append_floor_ops``); the
``http_post_floor`` row behind DRF, with DRF's token lookup (``bench.views.FloorView``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson

STATEMENT = (
    "WITH o AS (UPDATE memory_owner SET stamp = nextval('memory_stamp_seq'),"
    " last_seq = last_seq + 1, updated_at = statement_timestamp()"
    " WHERE external_id = %(owner)s RETURNING id, last_seq),"
    " s AS (UPDATE memory_session SET last_seen = %(at)s, turn_count = turn_count + 1"
    " FROM o WHERE memory_session.owner_id = o.id AND session_id = %(session)s),"
    " t AS (INSERT INTO memory_turn (owner_id, seq, session_id, role, content, metadata,"
    " created_at) SELECT id, last_seq, %(session)s, 'user', %(content)s, '{}', %(at)s FROM o"
    " RETURNING seq) SELECT seq FROM t"
)
SCRIPT = "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) redis.call('EXPIRE', KEYS[1], ARGV[3])"
# The session the floor's statement touches must exist (it only updates one); run once per owner.
SESSION_SQL = (
    "INSERT INTO memory_session (owner_id, session_id, first_seen, last_seen, turn_count)"
    " SELECT id, %(session)s, now(), now(), 0 FROM memory_owner WHERE external_id = %(owner)s"
    " ON CONFLICT DO NOTHING"
)


def floor_append(
    execute: Any, redis: Any, *, owner: str, session: str, content: str, key: str, ttl: int
) -> int:
    """Store a user turn of ``owner`` the floor's way; return its seq. ``execute(sql, params)``
    runs one statement in autocommit and gives its cursor; ``redis``: a redis-py client."""
    at = dt.datetime.now(dt.UTC)
    (seq,) = execute(
        STATEMENT, {"owner": owner, "session": session, "at": at, "content": content}
    ).fetchone()
    payload = orjson.dumps(
        {"seq": seq, "session_id": session, "role": "user", "content": content,
         "metadata": {}, "created_at": at.isoformat()}
    )  # fmt: skip
    redis.eval(SCRIPT, 1, key, f"t:{seq}", payload, ttl)
    return int(seq)
