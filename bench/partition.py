"""``python -m bench.partition``: what partitioning ``memory_turn`` by owner (hash partitions)
changes, measured on a simulation of ``--rows`` turns (10 million by default) in a scratch
database of its own (``--database``, created if missing; never the bench's or a site's).

The scratch database gets the app's schema by its migrations, then two copies of the turn
table built from it (``LIKE memory_turn``): ``sim_plain``, one table as shipped, and
``sim_hash``, the same columns ``PARTITION BY HASH (owner_id)`` into ``--partitions`` tables.
The turns are written in time order, owners interleaved (turn ``i`` belongs to owner
``i % owners``), as a busy site writes them; contents are 200-character English chat lines,
each with its search document computed once by the app's ``memory_search_document``. Indexes
are built after the load, the same on both (a partitioned table's primary key must hold the
partition key: ``(owner_id, id)`` there, which is one of the things that changes).

Then, interleaved query by query on random owners, each side's median and p95 of: a context
read (the last 20 turns), a full-text search of one owner, an append (one turn, committed), an
owner's forget (its turns deleted, rolled back); the sizes of each table and index, the time
to build each index and to vacuum the whole table against one partition. Prints a Markdown
table and writes ``bench/results/partition.json``. ``--keep`` measures the tables the last run
loaded (less the 1% of turns its vacuum step deleted); the database is left for the next run
(drop it with ``dropdb``). About 40 minutes and 17 GB of disk at 10M turns on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "bench" / "results" / "partition.json"
WORDS = [
    "like",
    "play",
    "basketball",
    "jazz",
    "noodles",
    "weekend",
    "friend",
    "work",
    "teacher",
    "shanghai",
    "music",
    "coffee",
    "python",
    "travel",
    "cat",
    "dinner",
    "morning",
    "remember",
    "tomorrow",
    "project",
    "meeting",
    "book",
    "movie",
    "garden",
    "walk",
    "rain",
    "summer",
    "weather",
    "birthday",
    "mother",
    "family",
    "school",
    "lesson",
    "student",
    "exam",
    "holiday",
]
# The indexes of memory_turn as migrated, built on each copy after the load.
INDEXES = {
    "owner_seq_uniq": "CREATE UNIQUE INDEX {name} ON {table} (owner_id, seq)",
    "session_idx": "CREATE INDEX {name} ON {table} (owner_id, session_id, seq)",
    "search_idx": "CREATE INDEX {name} ON {table} USING gin (owner_id, search)",
}
COLUMNS = "id, owner_id, seq, session_id, role, content, metadata, created_at, search"


def _sentences(count: int, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for _ in range(count):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < 200:
            words.append(rnd.choice(WORDS))
        out.append(" ".join(words)[:200])
    return out


def _timed(conn: psycopg.Connection, statement: str, params: Any = None) -> float:
    started = time.perf_counter()
    conn.execute(statement, params)
    return time.perf_counter() - started


def schema_build(url: str) -> None:
    """The app's schema in the scratch database, by its migrations."""
    import os

    os.environ["BENCH_DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def tables_load(conn: psycopg.Connection, *, rows: int, owners: int, partitions: int) -> dict:
    """Load ``sim_plain`` and ``sim_hash``; return the seconds of each step."""
    seconds: dict[str, float] = {}
    conn.execute("SET synchronous_commit = off")
    conn.execute("SET maintenance_work_mem = '256MB'")
    conn.execute("DROP TABLE IF EXISTS sim_plain, sim_hash, sim_sentence, sim_owner")
    conn.execute("CREATE TABLE sim_sentence (n int PRIMARY KEY, content text NOT NULL)")
    with conn.cursor().copy("COPY sim_sentence (n, content) FROM STDIN") as copy:
        for n, text in enumerate(_sentences(1000)):
            copy.write_row((n, text))
    # NOTE: no foreign key to memory_owner: the simulation's owners are numbers only.
    base = (
        "id bigint NOT NULL, owner_id bigint NOT NULL, seq bigint NOT NULL, "
        "session_id varchar(128) NOT NULL, role varchar(16) NOT NULL, content text NOT NULL, "
        "metadata jsonb NOT NULL, created_at timestamptz NOT NULL, search tsvector"
    )
    conn.execute(f"CREATE TABLE sim_plain ({base})")
    conn.execute(f"CREATE TABLE sim_hash ({base}) PARTITION BY HASH (owner_id)")
    for p in range(partitions):
        conn.execute(
            f"CREATE TABLE sim_hash_{p:03d} PARTITION OF sim_hash "
            f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {p})"
        )
    chunk = 500_000
    started = time.perf_counter()
    for first in range(1, rows + 1, chunk):
        last = min(rows, first + chunk - 1)
        # NOTE: time order, owners interleaved: turn i is owner (i % owners) + 1's
        # (i // owners) + 1-th; every sentence ends with the turn's number, so no two match.
        conn.execute(
            f"""
            INSERT INTO sim_plain ({COLUMNS})
            SELECT i, mod(i, %(owners)s) + 1, i / %(owners)s + 1, 'web',
                   CASE WHEN mod(i, 2) = 0 THEN 'user' ELSE 'assistant' END,
                   c.content || ' ' || i, '{{}}'::jsonb,
                   now() - make_interval(secs => (%(rows)s - i) / 50.0),
                   memory_search_document(c.content || ' ' || i)
            FROM generate_series(%(first)s, %(last)s) AS i
            JOIN sim_sentence c ON c.n = mod(i, 1000)
            """,
            {"owners": owners, "rows": rows, "first": first, "last": last},
        )
        print(f"  sim_plain: {last:,} rows ({time.perf_counter() - started:.0f} s)", flush=True)
    seconds["load_plain"] = time.perf_counter() - started
    started = time.perf_counter()
    conn.execute(f"INSERT INTO sim_hash ({COLUMNS}) SELECT {COLUMNS} FROM sim_plain")
    seconds["load_hash"] = time.perf_counter() - started
    print(f"  sim_hash: copied ({seconds['load_hash']:.0f} s)", flush=True)
    seconds["index_plain_pkey"] = _timed(conn, "ALTER TABLE sim_plain ADD PRIMARY KEY (id)")
    # NOTE: a partitioned table's unique keys must hold its partition key.
    seconds["index_hash_pkey"] = _timed(conn, "ALTER TABLE sim_hash ADD PRIMARY KEY (owner_id, id)")
    for suffix, ddl in INDEXES.items():
        for table in ("sim_plain", "sim_hash"):
            seconds[f"index_{table.removeprefix('sim_')}_{suffix}"] = _timed(
                conn, ddl.format(name=f"{table}_{suffix}", table=table)
            )
    conn.execute("CREATE TABLE sim_owner AS SELECT g AS owner_id FROM generate_series(1, %s) g",
                 [owners])  # fmt: skip
    for table in ("sim_plain", "sim_hash"):
        conn.execute(f"ANALYZE {table}")
    return seconds


def sizes(conn: psycopg.Connection, partitions: int) -> dict[str, Any]:
    """Bytes of each copy: heap (with TOAST), each index, all; and the largest partition."""
    out: dict[str, Any] = {}
    for table in ("sim_plain", "sim_hash"):
        parts = (
            [table] if table == "sim_plain" else [f"sim_hash_{p:03d}" for p in range(partitions)]
        )
        heap = sum(
            conn.execute("SELECT pg_table_size(%s::regclass)", [p]).fetchone()[0]  # type: ignore[index]
            for p in parts
        )
        indexes = sum(
            conn.execute("SELECT pg_indexes_size(%s::regclass)", [p]).fetchone()[0]  # type: ignore[index]
            for p in parts
        )
        largest = max(
            conn.execute("SELECT pg_total_relation_size(%s::regclass)", [p]).fetchone()[0]  # type: ignore[index]
            for p in parts
        )
        by_index = dict(
            conn.execute(  # type: ignore[arg-type]
                """
                SELECT regexp_replace(i.relname, '^sim_(plain|hash)_', ''),
                       coalesce((SELECT sum(pg_relation_size(relid)) FROM pg_partition_tree(i.oid)),
                                pg_relation_size(i.oid))::bigint
                FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                WHERE x.indrelid = %s::regclass
                """,
                [table],
            ).fetchall()
        )
        out[table] = {
            "heap": heap,
            "indexes": indexes,
            "total": heap + indexes,
            "largest_unit": largest,
            "by_index": by_index,
        }
    return out


def _pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def measure(conn: psycopg.Connection, *, owners: int, samples: int, seed: int = 1) -> dict:
    """Interleaved timings of each operation on both copies, random owners; seconds."""
    rnd = random.Random(seed)
    results: dict[str, dict[str, list[float]]] = {}
    next_seq = {"sim_plain": 10**9, "sim_hash": 10**9}
    next_id = {"sim_plain": 10**10, "sim_hash": 10**10}

    def read(table: str, owner: int) -> None:
        conn.execute(
            f"SELECT seq, role, content, created_at FROM {table} "
            "WHERE owner_id = %s ORDER BY seq DESC LIMIT 20",
            [owner],
        ).fetchall()

    def search(table: str, owner: int) -> None:
        conn.execute(
            f"SELECT seq, content FROM {table} WHERE owner_id = %s "
            "AND search @@ websearch_to_tsquery('english', 'basketball jazz') "
            "ORDER BY seq DESC LIMIT 10",
            [owner],
        ).fetchall()

    def append(table: str, owner: int) -> None:
        next_seq[table] += 1
        next_id[table] += 1
        conn.execute(
            f"INSERT INTO {table} ({COLUMNS}) VALUES (%s, %s, %s, 'web', 'user', %s, '{{}}', "
            "now(), memory_search_document(%s))",
            [next_id[table], owner, next_seq[table], WORDS[0] * 3, WORDS[0] * 3],
        )

    def forget(table: str, owner: int) -> None:
        with conn.transaction(force_rollback=True):
            conn.execute(f"DELETE FROM {table} WHERE owner_id = %s", [owner])

    ops: dict[str, Callable[[str, int], None]] = {
        "read": read,
        "search": search,
        "append": append,
        "forget": forget,
    }
    for name, op in ops.items():
        times: dict[str, list[float]] = {"sim_plain": [], "sim_hash": []}
        count = samples if name != "forget" else max(20, samples // 10)
        for i in range(count + 20):
            owner = rnd.randrange(1, owners + 1)
            order = ("sim_plain", "sim_hash") if i % 2 else ("sim_hash", "sim_plain")
            for table in order:
                started = time.perf_counter()
                op(table, owner)
                if i >= 20:  # NOTE: the first 20 warm the connection and the catalog
                    times[table].append(time.perf_counter() - started)
        results[name] = times
    # The appends are removed again, so that a rerun with --keep measures the same table.
    for table in ("sim_plain", "sim_hash"):
        conn.execute(f"DELETE FROM {table} WHERE seq > 1000000000")
    plans = {
        table: "\n".join(
            row[0]
            for row in conn.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT seq, content FROM {table} "
                "WHERE owner_id = 4242 ORDER BY seq DESC LIMIT 20"
            ).fetchall()
        )
        for table in ("sim_plain", "sim_hash")
    }
    summary = {
        name: {
            table: {
                "p50": statistics.median(values),
                "p95": _pct(values, 0.95),
                "n": len(values),
            }
            for table, values in times.items()
        }
        for name, times in results.items()
    }
    return {"ops": summary, "plans": plans}


def vacuum_times(conn: psycopg.Connection) -> dict[str, float]:
    """Seconds of a VACUUM of the whole plain table and of one partition (the unit a site's
    autovacuum works on), after a delete of 1% of each so that both have work."""
    out = {}
    conn.execute("DELETE FROM sim_plain WHERE owner_id % 100 = 0 AND seq > 95")
    conn.execute("DELETE FROM sim_hash WHERE owner_id % 100 = 0 AND seq > 95")
    out["vacuum_plain"] = _timed(conn, "VACUUM sim_plain")
    out["vacuum_one_partition"] = _timed(conn, "VACUUM sim_hash_000")
    out["vacuum_hash_all"] = _timed(conn, "VACUUM sim_hash")
    return out


def vector_bytes(conn: psycopg.Connection, count: int) -> dict[str, float]:
    """Bytes per vector of ``memory_turnvector`` as migrated (its heap, its btree indexes, and
    the HNSW index the embedding run builds), on ``count`` random unit vectors of 384
    dimensions (the built-in embedder's) in a copy of the table (``LIKE``, no foreign keys)."""
    conn.execute("DROP TABLE IF EXISTS sim_vector")
    conn.execute("CREATE TABLE sim_vector (LIKE memory_turnvector INCLUDING ALL)")
    conn.execute(
        """
        INSERT INTO sim_vector (turn_id, owner_id, model, vector)
        SELECT g, g / 100, 'multilingual-e5-small-q4',
               (SELECT array_agg(random() - 0.5) FROM generate_series(1, 384) d
                WHERE g > 0)::vector::halfvec
        FROM generate_series(1, %s) g
        """,
        [count],
    )
    heap = conn.execute("SELECT pg_table_size('sim_vector')").fetchone()[0]  # type: ignore[index]
    btree = conn.execute("SELECT pg_indexes_size('sim_vector')").fetchone()[0]  # type: ignore[index]
    seconds = _timed(
        conn,
        "CREATE INDEX sim_vector_hnsw ON sim_vector USING hnsw "
        "((vector::halfvec(384)) halfvec_cosine_ops)",
    )
    hnsw = conn.execute("SELECT pg_relation_size('sim_vector_hnsw')").fetchone()[0]  # type: ignore[index]
    return {
        "vectors": count,
        "heap_per_vector": heap / count,
        "btree_per_vector": btree / count,
        "hnsw_per_vector": hnsw / count,
        "hnsw_build_seconds": seconds,
    }


def report(result: dict[str, Any]) -> str:
    """The results as Markdown."""
    ops = result["ops"]
    lines = [
        "| operation | plain p50 | hash p50 | plain p95 | hash p95 | hash/plain p50 |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, sides in ops.items():
        a, b = sides["sim_plain"], sides["sim_hash"]
        lines.append(
            f"| {name} | {a['p50'] * 1e3:.2f} ms | {b['p50'] * 1e3:.2f} ms "
            f"| {a['p95'] * 1e3:.2f} ms | {b['p95'] * 1e3:.2f} ms | {b['p50'] / a['p50']:.2f}x |"
        )
    s = result["sizes"]
    lines += ["", "| bytes | plain | hash |", "| --- | ---: | ---: |"]
    for key in ("heap", "indexes", "total", "largest_unit"):
        lines.append(f"| {key} | {s['sim_plain'][key]:,} | {s['sim_hash'][key]:,} |")
    for key in sorted(s["sim_plain"]["by_index"]):
        lines.append(
            f"| index {key} | {s['sim_plain']['by_index'][key]:,} "
            f"| {s['sim_hash']['by_index'].get(key, 0):,} |"
        )
    lines += ["", "| seconds | value |", "| --- | ---: |"]
    for key, value in {**result.get("load", {}), **result.get("vacuum", {})}.items():
        lines.append(f"| {key} | {value:.1f} |")
    if "vector_bytes" in result:
        lines += ["", "| a vector | value |", "| --- | ---: |"]
        for key, value in result["vector_bytes"].items():
            lines.append(f"| {key} | {value:,.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.partition", description=__doc__)
    parser.add_argument("--database", default="memory_partition_sim")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--owners", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument(
        "--vectors", type=int, default=20_000, help="random vectors whose bytes are measured"
    )
    parser.add_argument("--keep", action="store_true", help="reuse the tables of the last run")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    if args.database in ("memory", "memory_bench", "postgres"):
        raise SystemExit("--database must be a scratch database of this script's own")
    from bench.seed import database_create

    url = f"postgres://postgres@{args.host}:5432/{args.database}"
    database_create(url)
    schema_build(url)
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    with psycopg.connect(
        host=args.host, user="postgres", dbname=args.database, autocommit=True
    ) as conn:
        have = conn.execute("SELECT to_regclass('sim_owner') IS NOT NULL").fetchone()[0]  # type: ignore[index]
        if not (args.keep and have):
            result["load"] = tables_load(
                conn, rows=args.rows, owners=args.owners, partitions=args.partitions
            )
        result["sizes"] = sizes(conn, args.partitions)
        result["rows"] = conn.execute("SELECT count(*) FROM sim_plain").fetchone()[0]  # type: ignore[index]
        result.update(measure(conn, owners=args.owners, samples=args.samples))
        result["vacuum"] = vacuum_times(conn)
        if args.vectors:
            result["vector_bytes"] = vector_bytes(conn, args.vectors)
    text = report(result)
    print(text)
    result["table"] = text
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
