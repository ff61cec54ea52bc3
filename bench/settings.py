"""Settings of the benchmark: the demo project's, on a database and a Redis key prefix of the
bench's own, without DEBUG (which would keep every query) and without throttling.

``BENCH_DATABASE_URL`` (default ``postgres://postgres@127.0.0.1:5432/memory_bench``; libpq's
multi-host form too) and ``BENCH_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) choose the
servers; the bench creates and migrates the database itself and only ever deletes keys under its
own prefix. ``BENCH_REPLICA_URL``: a read replica of that database (alias ``replica``).
"""

from __future__ import annotations

import os

# NOTE: the demo project refuses to start without a key when DEBUG is off; the bench's own,
# inherited by the gunicorn it spawns.
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-secret-key-" + "x" * 40)

from memoryproj.databases import database_parse
from memoryproj.settings import *  # noqa: F403
from memoryproj.settings import MEMORY, REST_FRAMEWORK, SERVED_BY_ASGI

DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/memory_bench"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
KEY_PREFIX = os.environ.get("BENCH_KEY_PREFIX", "membench")

DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "bench.urls"

# NOTE: the demo project's database options (persistent connections with health checks), so
# that the HTTP rows measure the server a host would run; only the database name differs.
DATABASES = {
    "default": database_parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True),
}
# NOTE: a read replica of that database: the failover rows' standby (bench/failover.py), which
# they name as MEMORY["READ_DATABASE"] only for the reads they measure.
if os.environ.get("BENCH_REPLICA_URL"):
    DATABASES["replica"] = database_parse(
        os.environ["BENCH_REPLICA_URL"], conn_max_age=60, conn_health_checks=True
    )
# NOTE: under uvicorn (memoryproj/asgi.py, the mcp row) Django's pool, as the demo pools its
# connections there: each request's sync code runs in a thread of its own.
if SERVED_BY_ASGI:
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {"pool": {"min_size": 2, "max_size": 8, "timeout": 5}}
# BENCH_PREPARED=1: server-side binding with psycopg's prepared statements, an option a site
# without a transaction-mode connection pooler may set (docs/performance.md).
if os.environ.get("BENCH_PREPARED") == "1":
    DATABASES["default"]["OPTIONS"] = {"server_side_binding": True, "prepare_threshold": 5}
_REDIS_OPTIONS = {"SOCKET_CONNECT_TIMEOUT": 0.25, "SOCKET_TIMEOUT": 0.25}
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "memory": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {**_REDIS_OPTIONS, "SERIALIZER": "memory.codec.OrjsonSerializer"},
    },
}
# NOTE: no embedder but in the rows of recall by meaning (bench/recall.py), which turn it on:
# the other rows measure what they measured before it existed.
MEMORY = {**MEMORY, "KEY_PREFIX": KEY_PREFIX, "EMBEDDER": None}

# NOTE: a chat backend calls as one service user for all its end users: no per-user rate.
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"user": None, "anon": None}}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"memory": {"handlers": ["console"], "level": "WARNING"}},
}
