"""The bench's own data: create and migrate its database, then seed a million turns with COPY.

Nothing here touches another database or another key prefix: ``reset`` truncates the app's
tables in the bench database and deletes only the Redis keys under the bench's prefix.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import dj_database_url
import psycopg
from psycopg import sql

# Content of seeded turns: printable ASCII with no tab, newline or backslash (COPY text format).
_WORDS = [
    *("memory", "context", "turn", "user", "assistant", "basketball", "shanghai", "teacher"),
    *("likes", "dislikes", "name", "session", "reply", "model", "cache", "database", "stamp"),
    *("history", "window", "token", "prompt", "answer", "question"),
]


def content_of(length: int, salt: int) -> str:
    """A deterministic sentence of exactly ``length`` characters."""
    words: list[str] = []
    size = 0
    i = salt
    while size < length:
        word = _WORDS[i % len(_WORDS)]
        words.append(word)
        size += len(word) + 1
        i = i * 7 + 3
    return " ".join(words)[:length]


# A chat history's words for the search owner. NOTE: hostile on purpose, as issue 12's owner
# was: a dozen topic words each in about a third of the turns (a typo of one is like a word
# of every third turn), the common words a chat has, a long tail of made-up names and jargon
# (a typo has many candidates), and Chinese turns (one in six) with some English mixed in.


def _words(text: str) -> list[str]:
    return text.split()


_HOT_WORDS = _words(
    "basketball shanghai teacher memory context like music coffee noodles weekend friend work"
)
_STOP_WORDS = _words(
    "i you we they he she it my your our the a an and or but so because if when then that this"
    " what which who how why where is are was were be been have has had do does did will would"
    " can could should may might must about with from into over after before"
)
_MEDIUM_WORDS = _words(
    "love hate want need think know remember forget tell ask said say talk call meet play"
    " played playing watch read write cook eat drink go went come came worked working live"
    " lived move travel visit book booked buy bought pay today tomorrow yesterday week month"
    " year morning evening night time day hour baseball football volleyball basket ball"
    " basketballs tennis golf swimming jazz concert concerts piano guitar song songs album"
    " noodle dumplings rice coffees tea restaurant restaurants museum museums park parks beach"
    " mountain city beijing shenzhen hangzhou london paris tokyo teachers teaching school"
    " student students doctor hospital engineer python javascript database server cache"
    " memories session model prompt token answer question reply holiday holidays birthday"
    " party family friends brother sister mother father wife son daughter cat cats dog dogs"
    " weather rain sunny cold hot snow train flight hotel ticket tickets price cheap expensive"
    " good great bad better best new old big small long short first last next again always"
    " never often sometimes really very much many more most"
)
_CHINESE_WORDS = _words(
    "我 你 他 我们 喜欢 不喜欢 打 篮球 足球 网球 音乐 爵士 咖啡 面条 饺子 上海 北京 老师 学生"
    " 医生 工程师 周末 明天 昨天 今天 早上 晚上 公园 博物馆 餐厅 电影 朋友 家人 妈妈 爸爸 猫 狗"
    " 天气 下雨 很 非常 想 去 看 吃 喝 玩 住在 工作 学习 记得 告诉 问题 回答 时间 生日 旅行"
)
_SYLLABLES = _words("ba ko ri ta me su no ha lo ve zi an ter mon ful gar den ston wick ley")
_TAIL_WORDS = [a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES]


def chat_content(seq: int) -> str:
    """A deterministic chat turn of 40-400 characters (see ``_HOT_WORDS``)."""
    import random

    rng = random.Random(seq)
    size = rng.choice((40, 80, 120, 200, 200, 300, 400))
    chinese = seq % 6 == 0
    words: list[str] = []
    length = 0
    while length < size:
        draw = rng.random()
        if chinese and draw < 0.7:
            word = _CHINESE_WORDS[int(rng.paretovariate(1.0) * 4 - 4) % len(_CHINESE_WORDS)]
        elif draw < 0.35:
            word = rng.choice(_STOP_WORDS)
        elif draw < 0.65:
            word = rng.choice(_HOT_WORDS)
        elif draw < 0.85:
            word = rng.choice(_MEDIUM_WORDS)
        else:
            word = _TAIL_WORDS[int(rng.paretovariate(0.8) * 10 - 10) % len(_TAIL_WORDS)]
        words.append(word)
        length += len(word) + 1
    return ("" if chinese else " ").join(words)[:size].strip() or "hello"


@dataclass
class OwnerPlan:
    """One owner to seed: its external id, how many turns, how long each turn's content
    (``chat``: varied chat turns of ``chat_content`` instead)."""

    owner_id: str
    turns: int
    content_chars: int = 200
    chat: bool = False


@dataclass
class Seeded:
    """What ``seed_turns`` wrote and how long it took."""

    owners: int = 0
    turns: int = 0
    seconds: float = 0.0
    pks: dict[str, int] = field(default_factory=dict)


def connect_params(url: str) -> dict[str, object]:
    """psycopg keyword arguments for a ``postgres://`` URL."""
    config = dj_database_url.parse(url)
    return {
        "host": config.get("HOST") or None,
        "port": config.get("PORT") or None,
        "user": config.get("USER") or None,
        "password": config.get("PASSWORD") or None,
        "dbname": config.get("NAME"),
    }


def database_create(url: str) -> bool:
    """Create the URL's database if it does not exist; return whether it was created."""
    params = connect_params(url)
    name = str(params.pop("dbname"))
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:  # type: ignore[arg-type]
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists:
            return False
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return True


APP_TABLES = (
    "memory_turn",
    "memory_session",
    "memory_fact",
    "memory_factversion",
    "memory_cacheinvalidation",
    "memory_searchword",
    "memory_owner",
    "authtoken_token",
)
# Tables holding rows of an owner, emptied before the owner itself (the app's foreign keys
# cascade in Django, not in the database).
OWNER_TABLES = (
    "memory_turn",
    "memory_session",
    "memory_fact",
    "memory_factversion",
    "memory_pendingsummary",
    "memory_summary",
)


def tables_reset(conn: psycopg.Connection) -> None:
    """Empty the app's tables and drop the bench's own, in the bench database."""
    conn.execute(
        sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
            sql.SQL(", ").join(sql.Identifier(name) for name in APP_TABLES)
        )
    )
    for name in ("bench_blob", "bench_seed"):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


def owners_delete(conn: psycopg.Connection, owner_ids: list[str]) -> None:
    """Delete these owners and every row of theirs (one transaction)."""
    with conn.transaction():
        pks = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM memory_owner WHERE external_id = ANY(%s)", [owner_ids]
            )
        ]
        for name in OWNER_TABLES:
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE owner_id = ANY(%s)").format(sql.Identifier(name)),
                [pks],
            )
        conn.execute("DELETE FROM memory_owner WHERE id = ANY(%s)", [pks])
        conn.execute("DELETE FROM memory_cacheinvalidation")


def signature_get(conn: psycopg.Connection) -> str | None:
    """The signature of the kept data, or ``None`` when there is none."""
    try:
        row = conn.execute("SELECT signature FROM bench_seed").fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    return row[0] if row else None


def signature_set(conn: psycopg.Connection, signature: str) -> None:
    conn.execute("DROP TABLE IF EXISTS bench_seed")
    conn.execute("CREATE TABLE bench_seed (signature text NOT NULL)")
    conn.execute("INSERT INTO bench_seed VALUES (%s)", [signature])


def schema_signature(conn: psycopg.Connection) -> str:
    """The app's applied migrations: kept data is reseeded when the schema moved."""
    rows = conn.execute(
        "SELECT name FROM django_migrations WHERE app = 'memory' ORDER BY id"
    ).fetchall()
    return ",".join(row[0] for row in rows)


def _copy_text(rows: Iterable[str]) -> Iterable[bytes]:
    buffer = io.StringIO()
    count = 0
    for row in rows:
        buffer.write(row)
        count += 1
        if count == 20000:
            yield buffer.getvalue().encode()
            buffer = io.StringIO()
            count = 0
    if count:
        yield buffer.getvalue().encode()


@contextlib.contextmanager
def _without_secondary_indexes(conn: psycopg.Connection, table: str) -> Iterator[None]:
    """Drop the table's unique and foreign-key constraints and its indexes but the primary
    key, then recreate each from its own definition as read from the catalog."""
    constraints = conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = %s::regclass AND contype IN ('u', 'f') ORDER BY contype DESC",
        [table],
    ).fetchall()
    for name, _ in constraints:
        conn.execute(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                sql.Identifier(table), sql.Identifier(name)
            )
        )
    indexes = conn.execute(
        "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x"
        " JOIN pg_class i ON i.oid = x.indexrelid"
        " WHERE x.indrelid = %s::regclass AND NOT x.indisprimary",
        [table],
    ).fetchall()
    for name, _ in indexes:
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
    yield
    conn.execute("SET LOCAL maintenance_work_mem = '256MB'")
    for _, definition in indexes:
        conn.execute(definition)
    for name, definition in reversed(constraints):
        conn.execute(
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} ").format(
                sql.Identifier(table), sql.Identifier(name)
            )
            + sql.SQL(definition)
        )


def seed_turns(conn: psycopg.Connection, plans: list[OwnerPlan], *, bulk: bool) -> Seeded:
    """Insert the owners, one session each and all their turns (COPY), then ANALYZE.

    Each owner gets ``last_seq`` = its turn count and a stamp from ``memory_stamp_seq``, as a
    service would have left it. ``bulk`` loads the turns with the table's indexes dropped and
    rebuilt. Runs in one transaction.
    """
    started = time.perf_counter()
    seeded = Seeded()
    now = dt.datetime.now(dt.UTC)
    base = now - dt.timedelta(days=30)
    with conn.transaction():
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memory_owner (external_id, last_seq, stamp, cache_dirty,"
                " created_at, updated_at) VALUES (%s, %s, nextval('memory_stamp_seq'), false,"
                " %s, %s) RETURNING id, external_id",
                [(plan.owner_id, plan.turns, base, now) for plan in plans],
                returning=True,
            )
            while True:
                row = cur.fetchone()
                if row is not None:
                    seeded.pks[row[1]] = row[0]
                if not cur.nextset():
                    break
        with conn.cursor().copy(
            "COPY memory_session (owner_id, session_id, first_seen, last_seen, turn_count)"
            " FROM STDIN"
        ) as copy:
            for plan in plans:
                copy.write_row((seeded.pks[plan.owner_id], "s1", base, now, plan.turns))
        contents: dict[int, list[str]] = {}
        for plan in plans:
            if plan.content_chars not in contents:
                contents[plan.content_chars] = [
                    content_of(plan.content_chars, salt) for salt in range(97)
                ]
        stamp = base.isoformat()

        def rows() -> Iterable[str]:
            for plan in plans:
                pk = seeded.pks[plan.owner_id]
                texts = contents[plan.content_chars]
                for seq in range(1, plan.turns + 1):
                    role = "user" if seq % 2 else "assistant"
                    text = chat_content(seq) if plan.chat else texts[seq % 97]
                    yield f"{pk}\t{seq}\ts1\t{role}\t{text}\t{{}}\t\\N\t{stamp}\n"

        # NOTE: a bulk load is several times faster into a table without its indexes and
        # foreign key; they are rebuilt (and the key checked) once, in the same transaction.
        rebuilt = _without_secondary_indexes(conn, "memory_turn") if bulk else None
        with (
            rebuilt or contextlib.nullcontext(),
            conn.cursor().copy(
                "COPY memory_turn (owner_id, seq, session_id, role, content, metadata,"
                " idempotency_key, created_at) FROM STDIN"
            ) as copy,
        ):
            for chunk in _copy_text(rows()):
                copy.write(chunk)
    conn.execute("ANALYZE memory_owner")
    conn.execute("ANALYZE memory_session")
    conn.execute("ANALYZE memory_turn")
    seeded.owners = len(plans)
    seeded.turns = sum(plan.turns for plan in plans)
    seeded.seconds = time.perf_counter() - started
    return seeded


def facts_seed(conn: psycopg.Connection, owner_pks: list[int], facts: dict[str, Any]) -> None:
    """Give each owner these facts at version 1, each with its one version (COPY)."""
    import orjson

    now = dt.datetime.now(dt.UTC)
    with conn.transaction():
        with conn.cursor().copy(
            "COPY memory_fact (owner_id, key, value, version, session_id, source_turn_seq,"
            " updated_at) FROM STDIN"
        ) as copy:
            for pk in owner_pks:
                for key, value in facts.items():
                    copy.write_row((pk, key, orjson.dumps(value).decode(), 1, "s1", None, now))
        with conn.cursor().copy(
            "COPY memory_factversion (owner_id, key, value, version, session_id,"
            " source_turn_seq, deleted, updated_at, actor) FROM STDIN"
        ) as copy:
            for pk in owner_pks:
                for key, value in facts.items():
                    copy.write_row(
                        (pk, key, orjson.dumps(value).decode(), 1, "s1", None, False, now, "python")
                    )


def turns_trim(conn: psycopg.Connection, base: dict[int, int]) -> int:
    """Put owners back as seeded: delete their turns past ``base[pk]`` and the sessions those
    opened, reset ``last_seq`` and the ``s1`` session's count, and give each a new stamp.
    Returns how many turns went."""
    pks, counts = list(base), list(base.values())
    with conn.transaction():
        deleted = conn.execute(
            "DELETE FROM memory_turn t USING unnest(%s::bigint[], %s::bigint[]) AS b(pk, n)"
            " WHERE t.owner_id = b.pk AND t.seq > b.n",
            [pks, counts],
        ).rowcount
        conn.execute("DELETE FROM memory_session WHERE session_id <> 's1'")
        conn.execute(
            "UPDATE memory_session s SET turn_count = b.n"
            " FROM unnest(%s::bigint[], %s::bigint[]) AS b(pk, n)"
            " WHERE s.owner_id = b.pk AND s.turn_count <> b.n",
            [pks, counts],
        )
        conn.execute(
            "UPDATE memory_owner o SET last_seq = b.n, stamp = nextval('memory_stamp_seq'),"
            " cache_dirty = false FROM unnest(%s::bigint[], %s::bigint[]) AS b(pk, n)"
            " WHERE o.id = b.pk AND (o.last_seq <> b.n OR o.cache_dirty)",
            [pks, counts],
        )
        conn.execute("DELETE FROM memory_cacheinvalidation")
    return deleted


def blob_seed(conn: psycopg.Connection, histories: dict[str, int], content_chars: int) -> None:
    """The naive design's table: one JSON document per owner holding its whole history."""
    import orjson

    conn.execute("DROP TABLE IF EXISTS bench_blob")
    conn.execute("CREATE TABLE bench_blob (owner text PRIMARY KEY, doc jsonb NOT NULL)")
    created = dt.datetime.now(dt.UTC).isoformat()
    with conn.transaction(), conn.cursor() as cur:
        for owner_id, n in histories.items():
            turns = [
                {
                    "seq": seq,
                    "session_id": "s1",
                    "role": "user" if seq % 2 else "assistant",
                    "content": content_of(content_chars, seq % 97),
                    "metadata": {},
                    "created_at": created,
                }
                for seq in range(1, n + 1)
            ]
            cur.execute(
                "INSERT INTO bench_blob (owner, doc) VALUES (%s, %s::jsonb)",
                [owner_id, orjson.dumps(turns).decode()],
            )
    conn.execute("ANALYZE bench_blob")
