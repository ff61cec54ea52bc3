"""Settings of the demo project, read from the environment (every variable: docs/settings.md; a
deployment's values: docs/production.md). ``DATABASE_URL`` (default SQLite) and ``REDIS_URL``,
``REDIS_CLUSTER_URL`` or ``REDIS_SENTINELS`` (default: no cache) choose the storage. DEBUG is off
unless ``DJANGO_DEBUG=1``; with it off, ``DJANGO_SECRET_KEY`` is required."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

import memory
from memoryproj.databases import database_parse

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _dev_secret_key() -> str:
    """The key of a DEBUG demo without ``DJANGO_SECRET_KEY``: random, made once and kept in
    ``DJANGO_DEV_SECRET_KEY_FILE`` (default ``.tmp/dev-secret-key``), so every process signs
    alike."""
    path = Path(
        os.environ.get("DJANGO_DEV_SECRET_KEY_FILE") or BASE_DIR / ".tmp" / "dev-secret-key"
    )
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            made = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            fd = os.open(made, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as file:
                file.write(f"django-insecure-{secrets.token_urlsafe(40)}\n")
            # NOTE: a link cannot replace a file: of gunicorn's workers starting at once, the
            # first one's key is everyone's.
            try:
                os.link(made, path)
            except FileExistsError:
                pass
            finally:
                made.unlink()
        key = path.read_text().strip()
    except OSError as e:
        raise ImproperlyConfigured(
            f"DEBUG is on without DJANGO_SECRET_KEY, and the development key file {path} "
            f"cannot be made or read ({e}): set DJANGO_SECRET_KEY or DJANGO_DEV_SECRET_KEY_FILE."
        ) from e
    if len(key) < 50:
        raise ImproperlyConfigured(
            f"The development key file {path} holds no key of 50 characters or more: delete it "
            "(a new one is made), or set DJANGO_SECRET_KEY."
        )
    return key


DEBUG = _env_bool("DJANGO_DEBUG", False)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "").strip()
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set and DEBUG is off: set DJANGO_SECRET_KEY (e.g. "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'), or DJANGO_DEBUG=1 "
            "for a local demo."
        )
    # NOTE: no built-in key, even for DEBUG; and not one per process, which logs a visitor out
    # whenever the next request reaches another worker.
    SECRET_KEY = _dev_secret_key()
ALLOWED_HOSTS = _env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = _env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")
# Check ids not to report (comma-separated); `make run` sets memory.W005 on its SQLite default.
SILENCED_SYSTEM_CHECKS = _env_list("DJANGO_SILENCED_SYSTEM_CHECKS", "")

# HTTPS in production (docs/production.md); each off unless its variable says.
SECURE_SSL_REDIRECT = _env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
SESSION_COOKIE_SECURE = _env_bool("DJANGO_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_SECURE_HSTS_SECONDS", "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = _env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
# NOTE: trust X-Forwarded-Proto only when a TLS-terminating proxy in front sets it (and strips
# a client's own); otherwise a client could claim HTTPS.
if _env_bool("DJANGO_SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "django_tasks",
    "django_tasks_db",
    "drf_spectacular_sidecar",
    "memory",
    # The demo's own table: failed logins, for the login page's throttle (memoryproj/logins.py).
    "memoryproj",
]

# Deferred fact extraction (docs/extraction.md) runs as django-tasks tasks; their database
# backend keeps the queue in Postgres, run by `manage.py db_worker`.
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # NOTE: static files (the admin's CSS, Swagger UI) under gunicorn and uvicorn too, from
    # STATIC_ROOT (manage.py collectstatic); with DEBUG on, straight from the apps.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # NOTE: a lost database is a 503 on every page, never a 500 (memoryproj/middleware.py).
    "memoryproj.middleware.DatabaseUnavailableMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "memoryproj.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The demo chat page's template (memoryproj/chat.py); the app's own come with the app.
        "DIRS": [BASE_DIR / "memoryproj" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "memoryproj.wsgi.application"
# NOTE: memoryproj/asgi.py sets MEMORYPROJ_ASGI=1 before the settings load: the project then says so
# (ASGI_APPLICATION, read by memory.W011) and pools its database connections.
SERVED_BY_ASGI = _env_bool("MEMORYPROJ_ASGI", False)
if SERVED_BY_ASGI:
    ASGI_APPLICATION = "memoryproj.asgi.application"

DATABASES = {
    "default": database_parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        conn_health_checks=True,
    )
}
# A read replica of that database (PostgreSQL streaming replication): cold reads go to it when
# it holds the user's last write, else to the primary (MEMORY["READ_DATABASE"], docs/scaling.md).
DATABASE_REPLICA_URL = os.environ.get("DATABASE_REPLICA_URL", "").strip()
if DATABASE_REPLICA_URL:
    DATABASES["replica"] = database_parse(DATABASE_REPLICA_URL, conn_health_checks=True)
# NOTE: on SQLite (the demo's default), every transaction takes the write lock when it begins and
# waits for it: a deferred one that read first and then writes would fail at once with "database
# is locked" while another process writes (make run's task worker, claiming a task), not wait.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(transaction_mode="IMMEDIATE", timeout=20)
# "transaction" behind PgBouncer in transaction mode (docs/scaling.md): Django keeps no
# server-side cursor, and the app no prepared statement, past a transaction.
DATABASE_POOLER = os.environ.get("DATABASE_POOLER", "").strip() or None
if DATABASE_POOLER == "transaction":
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
# NOTE: bounded connections under every server: under WSGI one per gunicorn thread (CONN_MAX_AGE
# 60); under ASGI Django's pool (DATABASE_POOL_SIZE a process), as each request's sync thread would
# leave its connection open; behind PgBouncer, none kept.
_POSTGRES = DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
_POOL_SIZE = int(
    os.environ.get("DATABASE_POOL_SIZE")
    or (8 if SERVED_BY_ASGI and _POSTGRES and DATABASE_POOLER != "transaction" else 0)
)
_CONN_MAX_AGE = os.environ.get("DATABASE_CONN_MAX_AGE", "").strip()
if _POOL_SIZE > 0:
    if not _POSTGRES:
        raise ImproperlyConfigured("DATABASE_POOL_SIZE needs PostgreSQL (psycopg's pool).")
    if _CONN_MAX_AGE not in ("", "0"):
        raise ImproperlyConfigured(
            f"DATABASE_CONN_MAX_AGE is {_CONN_MAX_AGE} with a pool of {_POOL_SIZE} connections "
            "(DATABASE_POOL_SIZE; under ASGI 8 by default): Django's pool keeps none itself. "
            "Unset DATABASE_CONN_MAX_AGE, or set DATABASE_POOL_SIZE=0."
        )
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(2, _POOL_SIZE),
        "max_size": _POOL_SIZE,
        # Seconds a request waits for a free connection; then a 503.
        "timeout": float(os.environ.get("DATABASE_POOL_TIMEOUT", "5")),
    }
else:
    DATABASES["default"]["CONN_MAX_AGE"] = int(_CONN_MAX_AGE or (0 if SERVED_BY_ASGI else 60))
if "replica" in DATABASES:
    # NOTE: the replica's connections are kept as the primary's are (not pooled).
    DATABASES["replica"]["CONN_MAX_AGE"] = int(_CONN_MAX_AGE or (0 if SERVED_BY_ASGI else 60))

# NOTE: the "memory" alias exists only when REDIS_URL, REDIS_CLUSTER_URL or REDIS_SENTINELS is set;
# without, everything is read from the database.
REDIS_URL = os.environ.get("REDIS_URL", "").strip()
REDIS_CLUSTER_URL = os.environ.get("REDIS_CLUSTER_URL", "").strip()
# host:port,host:port of the sentinels, and the name they monitor the primary under.
REDIS_SENTINELS = [
    (host.strip(), int(port))
    for host, _, port in (
        item.strip().rpartition(":")
        for item in os.environ.get("REDIS_SENTINELS", "").split(",")
        if item.strip()
    )
]
REDIS_SENTINEL_MASTER = os.environ.get("REDIS_SENTINEL_MASTER", "mymaster").strip()
_REDIS_TIMEOUT = float(os.environ.get("REDIS_SOCKET_TIMEOUT", "0.25"))
_REDIS_OPTIONS: dict[str, object] = {
    "SOCKET_CONNECT_TIMEOUT": _REDIS_TIMEOUT,
    "SOCKET_TIMEOUT": _REDIS_TIMEOUT,
}
if REDIS_CLUSTER_URL:
    _REDIS_LOCATION = REDIS_CLUSTER_URL
    _REDIS_OPTIONS["CLIENT_CLASS"] = "memory.cache.cluster.ClusterClient"
elif REDIS_SENTINELS:
    # NOTE: the URL's host is the monitored name; the sentinels say where that primary is now.
    # The app's cache layer only ever asks for the primary's connection (never a replica's).
    _REDIS_LOCATION = f"redis://{REDIS_SENTINEL_MASTER}/0"
    _REDIS_OPTIONS.update(
        CLIENT_CLASS="django_redis.client.SentinelClient",
        CONNECTION_FACTORY="django_redis.pool.SentinelConnectionFactory",
        SENTINELS=REDIS_SENTINELS,
        SENTINEL_KWARGS={
            "socket_connect_timeout": _REDIS_TIMEOUT,
            "socket_timeout": _REDIS_TIMEOUT,
        },
    )
else:
    _REDIS_LOCATION = REDIS_URL
if _REDIS_LOCATION:
    CACHES: dict[str, dict[str, Any]] = {
        # NOTE: nothing of the project uses Django's default cache (the throttles count through
        # the memory cache's breaker): a Redis alias here would be a use of Redis without one.
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "memory": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": _REDIS_LOCATION,
            "OPTIONS": {
                # NOTE: short timeouts make a Redis that does not answer degrade to the
                # database in milliseconds. IGNORE_EXCEPTIONS stays off on this alias: the
                # app tells "down" from "miss" itself (memory/cache/client.py).
                **_REDIS_OPTIONS,
                "SERIALIZER": "memory.codec.OrjsonSerializer",
            },
        },
    }
else:
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }

# The chat over a websocket (ws/chat/, under ASGI: memoryproj/sockets.py) reaches the sockets of
# an owner on other instances through the channel layer, on the cache's Redis (REDIS_URL); without
# one, this process's sockets only (docs/websocket.md). MEMORYPROJ_CHANNELS_PREFIX names its keys.
CHANNEL_LAYERS: dict[str, dict[str, Any]]
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # NOTE: a receive blocks on Redis up to 5 s (channels_redis's BZPOPMIN): the
                # socket's own timeout must be longer.
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_connect_timeout": 1.0,
                        "socket_timeout": 10,
                    }
                ],
                "prefix": os.environ.get("MEMORYPROJ_CHANNELS_PREFIX", "memoryproj-chat"),
                # NOTE: a socket's events wait at most this long for it (then it catches up from
                # the database), and at most this many of them.
                "expiry": 30,
                "capacity": 500,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

MEMORY = {
    "CACHE_TTL": int(os.environ.get("MEMORY_CACHE_TTL", "3600")),
    "POOLER": DATABASE_POOLER,
    "READ_DATABASE": "replica" if DATABASE_REPLICA_URL else None,
    # The bearer token Prometheus sends to /metrics (docs/metrics.md); unset: service callers only.
    "METRICS_TOKEN": os.environ.get("MEMORY_METRICS_TOKEN") or None,
    # Replicas each Redis primary has: a write's cache update counts once they hold it, so that
    # a failover never promotes an older copy (docs/scaling.md). One by default under Sentinel
    # or Cluster, none for a single Redis; MEMORY_CACHE_REPLICAS says otherwise.
    "CACHE_REPLICAS": int(
        os.environ.get("MEMORY_CACHE_REPLICAS")
        or (1 if REDIS_CLUSTER_URL or REDIS_SENTINELS else 0)
    ),
}

# What one anonymous visitor's memory may hold on the chat page (memoryproj/anonymous.py): turns,
# and characters of their contents; past either a message is refused (403: log in to go on).
MEMORYPROJ_ANON_MAX_TURNS = int(os.environ.get("MEMORYPROJ_ANON_MAX_TURNS", "200"))
MEMORYPROJ_ANON_MAX_CHARS = int(os.environ.get("MEMORYPROJ_ANON_MAX_CHARS", "200000"))
# Days an anonymous memory nobody writes to is kept; the worker's task memoryproj.tasks.anon_sweep
# (or `manage.py memory_forget_idle --prefix anon- --idle-for 30d` from cron) forgets it then.
MEMORYPROJ_ANON_RETENTION_DAYS = int(os.environ.get("MEMORYPROJ_ANON_RETENTION_DAYS", "30"))

# The demo chat page's assistant (/chat/, memoryproj/chat.py): a dotted path to a class with
# ``respond(*, context, message) -> str`` (memoryproj.responders.Responder). A site puts its LLM
# call there; the default answers from the memory alone, deterministically.
MEMORYPROJ_RESPONDER = "memoryproj.responders.DeterministicResponder"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", BASE_DIR / "staticfiles"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # NOTE: compressed copies, no manifest: pages render before collectstatic has run.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat"
LOGOUT_REDIRECT_URL = "chat"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# NOTE: a turn is at most MAX_TURN_CHARS (32768) characters, and metadata at most 16 KiB of
# JSON: even written with \u escapes a valid body stays under 1 MiB. A larger one is a 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024


def _env_rate(name: str, default: str) -> str | None:
    """A DRF throttle rate such as ``10000/hour`` from the environment; empty means no limit."""
    value = os.environ.get(name, default).strip()
    return value or None


def _login_rate(name: str, default: str) -> tuple[int, int] | None:
    """``count/period`` (DRF's form: ``10/hour``; period ``s``, ``m``, ``h`` or ``d``) as
    (count, seconds) from the environment; empty means no limit."""
    value = _env_rate(name, default)
    if value is None:
        return None
    count, _, period = value.partition("/")
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(period[:1])
    if not count.isascii() or not count.isdigit() or int(count) < 1 or seconds is None:
        raise ImproperlyConfigured(f"{name} is {value!r}: give count/period, such as 10/hour.")
    return int(count), seconds


# Failed logins on the demo's login page per client address and username within a period
# (MEMORY_THROTTLE_LOGIN, default 10/hour; empty: no limit). Counted in the database, not the
# cache; past it the page answers 429 (memoryproj/logins.py).
MEMORYPROJ_LOGIN_THROTTLE = _login_rate("MEMORY_THROTTLE_LOGIN", "10/hour")

REST_FRAMEWORK = {
    # NOTE: DRF's token authentication, which on the memory API's views also answers the
    # permission check in the same statement (memory/authentication.py).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "memory.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Requests per authenticated user (MEMORY_THROTTLE_USER, default 10000/hour) and per anonymous
    # address (MEMORY_THROTTLE_ANON, default 1000/hour); empty: no limit. A chat backend calling as
    # one service user needs a higher user rate. Counted through the memory cache's breaker.
    "DEFAULT_THROTTLE_CLASSES": [
        "memory.throttling.AnonRateThrottle",
        "memory.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": _env_rate("MEMORY_THROTTLE_USER", "10000/hour"),
        "anon": _env_rate("MEMORY_THROTTLE_ANON", "1000/hour"),
        # The chat page's messages from visitors who have not logged in (memoryproj/anonymous.py):
        # per browser session, per client address, and new anonymous memories per address.
        "chat_session": _env_rate("MEMORY_THROTTLE_CHAT_SESSION", "20/minute"),
        "chat_address": _env_rate("MEMORY_THROTTLE_CHAT_ADDRESS", "60/minute"),
        "chat_new": _env_rate("MEMORY_THROTTLE_CHAT_NEW", "20/hour"),
    },
    # NOTE: how many proxies in front append to X-Forwarded-For (DJANGO_NUM_PROXIES). 0: the
    # anonymous throttle counts by the peer address and ignores the header a client can forge.
    "NUM_PROXIES": int(os.environ.get("DJANGO_NUM_PROXIES", "0")),
}

# The OpenAPI 3 schema of the memory API, served at /api/schema/ with a Swagger UI at /api/docs/
# and Redoc at /api/redoc/.
SPECTACULAR_SETTINGS = {
    "TITLE": "memory",
    "DESCRIPTION": "Durable user-level memory for AI chat products: turns, facts and the "
    "context for the next model call.",
    "VERSION": memory.__version__,
    "SERVE_INCLUDE_SCHEMA": False,
    "OAS_VERSION": "3.1.0",
    # NOTE: Swagger UI and Redoc from drf-spectacular-sidecar's static files: nothing from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # NOTE: no "valid" badge: Swagger UI would send the schema's address to validator.swagger.io.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
}

# NOTE: no query string (search text, user_id=) and no owner id (users/{user_id}/) in the 5xx
# lines and runserver's access log; memoryproj.wsgi and .asgi do the same for gunicorn's and
# uvicorn's (memoryproj/logs.py).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact": {"()": "memoryproj.logs.RedactRequests"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        # Django's own format of runserver's lines.
        "server": {
            "()": "django.utils.log.ServerFormatter",
            "format": "[{server_time}] {message}",
            "style": "{",
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "requests": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["redact"],
        },
        "server": {"class": "logging.StreamHandler", "formatter": "server", "filters": ["redact"]},
    },
    "loggers": {
        "memory": {"handlers": ["console"], "level": os.environ.get("MEMORY_LOG_LEVEL", "INFO")},
        # NOTE: a 500 with DEBUG off, logged with its traceback (Django's default sends it only
        # to ADMINS by mail, which the demo has not).
        "django.request": {"handlers": ["requests"], "level": "ERROR", "propagate": False},
        "django.server": {"handlers": ["server"], "level": "INFO", "propagate": False},
        "memoryproj": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}
