"""System checks (``manage.py check``) for the ``MEMORY`` setting and the cache alias it names."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from memory import tokens
from memory.conf import DEFAULTS, as_int, callable_import, conf, setting_import
from memory.extras import extra_install, worker_checks
from memory.selectors.facts import fact_dot_key_list

logger = logging.getLogger("memory")

# One id per problem:
#   E001 MEMORY is not a dict                E007 the cache alias is not in CACHES
#   E002 a count is not a positive integer   E008 the cache is not a django-redis cache
#   E003 a duration is not a number >= 0     E009 the cache hides errors (IGNORE_EXCEPTIONS)
#        (RECONCILE_INTERVAL: > 0)
#   E004 KEY_PREFIX is not a usable prefix   E010 FILL_WAIT_MS is not an integer >= 0
#   E005 CONTEXT_TURNS > MAX_CONTEXT_TURNS   E011 CACHE_ALIAS is not a string
#   E006 OWNER_RESOLVER cannot be imported   E012 OWNER_RESOLVER is not callable
#   E013 FACT_EXTRACTOR cannot be imported   E014 a deferred extractor without django-tasks
#   E015 TOKEN_COUNTER is tiktoken_counter, which cannot count here (no package, no cached file)
#   E016 TOKEN_COUNTER cannot be imported or called
#   E017 the cache alias sets its own KEY_PREFIX
#   E018 METRICS_TOKEN is not None or a string of 16+ characters
#   E019 a cluster memory alias reads from replicas
#   E020 REPAIR_THREAD or ENQUEUE_THREAD is not a bool
#   E021 CACHE_REPLICAS is not an integer >= 0, or CACHE_REPLICA_WAIT_MS not a positive one
#   E022 POOLER is not None, "session" or "transaction"
#   E023 PREPARED_STATEMENTS is not None, True or False
#   E024 SUMMARIZER cannot be imported or is not callable
#   W001 unknown MEMORY keys                 W004 the cache has no socket timeouts
#   W002 CACHE_TURNS < CONTEXT_TURNS         W005 the database is not PostgreSQL
#   W006 a deferred extractor whose tasks run immediately, inside the request
#   Behind a transaction pooler (POOLER "transaction"), session state that does not survive it:
#   W007 PREPARED_STATEMENTS is True
#   W008 a database of the app keeps server-side cursors (no DISABLE_SERVER_SIDE_CURSORS)
#   W009 a database of the app sets session state in OPTIONS (prepared statements, SET ROLE)
#   W010 facts whose key is made only of dots (a database check: check --database default)
#   W011 persistent connections (CONN_MAX_AGE, no OPTIONS["pool"]) under ASGI
#   W012 summaries on, but django-tasks is not installed (no refresh runs by itself)
#   W013 summaries on, but TASKS runs tasks immediately, inside the request
#   E027, W014-W016: the embedder's (memory.recall.checks)
#   E031-E033: the databases' (memory.postgres.checks)

COUNTS = (
    "CACHE_TTL",
    "CACHE_TURNS",
    "CONTEXT_TURNS",
    "MAX_CONTEXT_TURNS",
    "MAX_TURN_CHARS",
    "MAX_PAGE_BYTES",
    "MAX_JSON_BYTES",
    "MAX_FACTS",
    "SEARCH_TIMEOUT_MS",
    "QUERY_EMBED_TIMEOUT_MS",
    "LINK_BATCH_TURNS",
    "HEAVY_READS_PER_CALLER",
    "SUMMARY_AFTER_TOKENS",
    "SUMMARY_BATCH_TURNS",
    "EMBED_BATCH_TURNS",
    "RECALL_TURNS",
)
DURATIONS = (
    "RECONCILE_INTERVAL",
    "RECONCILE_GRACE",
    "SUSPECT_WINDOW",
    "HISTORY_LEASE",
    "CACHE_REPLICA_GRACE",
)
VALUE_IDS = {
    **{name: "memory.E003" for name in DURATIONS},
    "KEY_PREFIX": "memory.E004",
    "FILL_WAIT_MS": "memory.E010",
    "REPAIR_THREAD": "memory.E020",
    "ENQUEUE_THREAD": "memory.E020",
    "CACHE_REPLICAS": "memory.E021",
    "CACHE_REPLICA_WAIT_MS": "memory.E021",
    "POOLER": "memory.E022",
    "PREPARED_STATEMENTS": "memory.E023",
}


def _int(value: Any) -> bool:
    return as_int(value) is not None


def _user_memory() -> Any:
    return getattr(settings, "MEMORY", None) or {}


@register(Tags.compatibility)
def check_memory_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Each ``MEMORY`` value has the type and range the app needs."""
    user = _user_memory()
    if not isinstance(user, dict):
        return [
            Error(
                f"MEMORY must be a dict, not {type(user).__name__}.",
                hint="Set MEMORY = {...} with the keys to change, or leave it out.",
                id="memory.E001",
            )
        ]
    errors: list[CheckMessage] = []
    unknown = sorted(set(user) - set(DEFAULTS), key=str)
    if unknown:
        errors.append(
            Warning(
                f"MEMORY has unknown keys: {', '.join(map(str, unknown))}.",
                hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
                id="memory.W001",
            )
        )
    values = {name: user.get(name, DEFAULTS[name]) for name in DEFAULTS}
    problems = conf.problems()
    for name in (
        *COUNTS,
        *DURATIONS,
        "KEY_PREFIX",
        "FILL_WAIT_MS",
        "REPAIR_THREAD",
        "ENQUEUE_THREAD",
        "CACHE_REPLICAS",
        "CACHE_REPLICA_WAIT_MS",
        "POOLER",
        "PREPARED_STATEMENTS",
    ):
        if name in problems:
            errors.append(Error(problems[name], id=VALUE_IDS.get(name, "memory.E002")))
    context, most = values["CONTEXT_TURNS"], values["MAX_CONTEXT_TURNS"]
    cached = values["CACHE_TURNS"]
    if all(_int(n) and n > 0 for n in (context, most)) and context > most:
        errors.append(
            Error(
                f"MEMORY['CONTEXT_TURNS'] ({context}) exceeds "
                f"MEMORY['MAX_CONTEXT_TURNS'] ({most}).",
                id="memory.E005",
            )
        )
    if all(_int(n) and n > 0 for n in (context, cached)) and cached < context:
        errors.append(
            Warning(
                f"MEMORY['CACHE_TURNS'] ({cached}) is below MEMORY['CONTEXT_TURNS'] ({context}): "
                "default contexts of owners with more turns will always read the database.",
                id="memory.W002",
            )
        )
    errors += _check_resolver(values["OWNER_RESOLVER"])
    errors += _check_extractor(values["FACT_EXTRACTOR"])
    errors += _check_token_counter(values["TOKEN_COUNTER"])
    # NOTE: left unset, the summarizer depends on django-tasks (memory.conf): check conf's value.
    errors += _check_summarizer(values["SUMMARIZER"] if "SUMMARIZER" in user else conf.SUMMARIZER)
    token = values["METRICS_TOKEN"]
    if token is not None and not (isinstance(token, str) and len(token) >= 16):
        errors.append(
            Error(
                "MEMORY['METRICS_TOKEN'] must be None or a string of at least 16 characters.",
                hint="Generate one with: python -c 'import secrets; print(secrets.token_hex())'",
                id="memory.E018",
            )
        )
    return errors


@register(Tags.compatibility)
def check_memory_pooler(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Behind a transaction pooler, nothing the app relies on outlives a transaction: no
    prepared statements of its own, no server-side cursors, no session settings."""
    user = _user_memory()
    if not isinstance(user, dict) or user.get("POOLER") != "transaction":
        return []
    errors: list[CheckMessage] = []
    if user.get("PREPARED_STATEMENTS") is True:
        errors.append(
            Warning(
                "MEMORY['PREPARED_STATEMENTS'] is True behind a transaction pooler "
                "(MEMORY['POOLER']): a statement the app prepared on one server connection is "
                "unknown on the next, or another client's statement of the same name.",
                hint="Leave it unset (off behind a transaction pooler). Where the pooler keeps "
                "prepared statements per client (PgBouncer 1.21+ with max_prepared_statements), "
                "keep it and add memory.W007 to SILENCED_SYSTEM_CHECKS.",
                id="memory.W007",
            )
        )
    for alias in _app_databases():
        # The connection's own settings, as Django applies them.
        config = connections[alias].settings_dict
        if not config.get("DISABLE_SERVER_SIDE_CURSORS"):
            errors.append(
                Warning(
                    f"DATABASES[{alias!r}] keeps server-side cursors behind a transaction "
                    "pooler (MEMORY['POOLER']): a QuerySet.iterator() cursor would outlive its "
                    "transaction's server connection.",
                    hint=f"Set DATABASES[{alias!r}]['DISABLE_SERVER_SIDE_CURSORS'] = True, as "
                    "Django documents for transaction pooling.",
                    id="memory.W008",
                )
            )
        options = config.get("OPTIONS") or {}
        held = []
        # NOTE: psycopg prepares only on Django's server-binding cursors, never on the default one.
        if (
            options.get("server_side_binding") is True
            and options.get("prepare_threshold") is not None
        ):
            held.append(
                "prepare_threshold with server_side_binding (psycopg's prepared statements)"
            )
        if options.get("assume_role"):
            held.append("assume_role (SET ROLE)")
        if held:
            errors.append(
                Warning(
                    f"DATABASES[{alias!r}]['OPTIONS'] sets session state behind a transaction "
                    f"pooler (MEMORY['POOLER']): {', '.join(held)}; the pooler hands the next "
                    "transaction a server connection without it, or with another client's.",
                    hint="Remove them from OPTIONS, or connect to PostgreSQL directly: Django's "
                    "own pool (OPTIONS['pool']) needs no PgBouncer.",
                    id="memory.W009",
                )
            )
    return errors


@register(Tags.compatibility)
def check_memory_asgi_connections(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Served under ASGI, no database of the app keeps connections (``CONN_MAX_AGE``) without
    Django's pool: each request's sync thread's connection is never closed there. ASGI means
    ``ASGI_APPLICATION`` is set, or an ASGI request has reached the process."""
    if not (getattr(settings, "ASGI_APPLICATION", None) or _served.asgi):
        return []
    return persistent_connections()


def persistent_connections() -> list[CheckMessage]:
    """The warnings ``memory.W011`` of the app's databases that keep connections unpooled."""
    errors: list[CheckMessage] = []
    for alias in _app_databases():
        config = connections[alias].settings_dict
        kept = config.get("CONN_MAX_AGE", 0)
        if kept == 0 or (config.get("OPTIONS") or {}).get("pool"):
            continue
        errors.append(
            Warning(
                f"DATABASES[{alias!r}] keeps connections (CONN_MAX_AGE {kept}) under ASGI: "
                "there Django runs each request's sync code in a thread of its own, and the "
                "connection it kept stays open and idle after it, one per request, until "
                "PostgreSQL runs out of connections.",
                hint="Use Django's pool (Django 5.1+, psycopg[pool]): OPTIONS['pool'] = "
                "{'max_size': 8} with CONN_MAX_AGE = 0; behind PgBouncer (MEMORY['POOLER']), "
                "CONN_MAX_AGE = 0.",
                id="memory.W011",
            )
        )
    return errors


class _Served:
    """Whether this process has served a request through Django's ASGI handler."""

    asgi = False


_served = _Served()


def asgi_request_started(sender: Any, **kwargs: Any) -> None:
    """``request_started`` receiver: on the first ASGI request, log the ``memory.W011`` warnings
    once, then stop listening."""
    from django.core.handlers.asgi import ASGIHandler
    from django.core.signals import request_started

    if not (isinstance(sender, type) and issubclass(sender, ASGIHandler)):
        return
    _served.asgi = True
    request_started.disconnect(dispatch_uid=ASGI_RECEIVER)
    for warning in persistent_connections():
        logger.warning("%s (%s) %s", warning.msg, warning.id, warning.hint)


ASGI_RECEIVER = "memory_asgi_connections"


def _app_databases() -> list[str]:
    """The PostgreSQL aliases the app's statements run on: ``default`` (an append's call) and
    those the routers pick for its models and the token lookup's."""
    from django.apps import apps
    from django.db import DEFAULT_DB_ALIAS, router

    models = list(apps.get_app_config("memory").get_models())
    if apps.is_installed("rest_framework.authtoken"):
        models.append(apps.get_model("authtoken", "Token"))
    aliases = {DEFAULT_DB_ALIAS}
    for model in models:
        aliases |= {router.db_for_read(model), router.db_for_write(model)}
    return [
        alias
        for alias in sorted(aliases)
        if alias in settings.DATABASES and connections[alias].vendor == "postgresql"
    ]


def _check_token_counter(path: Any) -> list[CheckMessage]:
    hint = "Name a callable str -> int, such as memory.tokens.estimate_counter (the default)."
    try:
        counter = callable_import("TOKEN_COUNTER", path)
    except ImproperlyConfigured as e:
        return [Error(str(e), hint=hint, id="memory.E016")]
    problem = tokens.tiktoken_unavailable() if counter is tokens.tiktoken_counter else None
    if problem is not None:
        return [
            Error(
                f"MEMORY['TOKEN_COUNTER'] is {path!r}, but {problem}.",
                hint="Or keep the default estimate, memory.tokens.estimate_counter.",
                id="memory.E015",
            )
        ]
    return []


def _check_extractor(path: Any) -> list[CheckMessage]:
    if path is None:
        return []
    try:
        setting_import("FACT_EXTRACTOR", path)
    except ImproperlyConfigured as e:
        return [
            Error(
                str(e),
                hint="Name an extractor class, factory or instance, or None to turn it off.",
                id="memory.E013",
            )
        ]
    return _check_deferred(path)


def _check_deferred(path: str) -> list[CheckMessage]:
    """A deferred extractor needs django-tasks, and a backend that runs tasks in a worker."""
    from memory.extraction.base import extractor_deferred, extractor_load

    try:
        deferred = extractor_deferred(extractor_load(path))
    except Exception:
        # A factory that fails here fails at run time too, where it is logged per turn.
        return []
    if not deferred:
        return []
    subject = f"MEMORY['FACT_EXTRACTOR'] {path!r} is deferred"
    missing = Error(
        f"{subject}, but django-tasks is not installed.",
        hint=f"{extra_install('deferred')}, a task backend (django-tasks-db), and set TASKS.",
        id="memory.E014",
    )
    consequence = "each extraction runs inside the request, after its commit."
    return worker_checks(missing, subject, consequence, "memory.W006")


def _check_summarizer(path: Any) -> list[CheckMessage]:
    """A summarizer is an importable callable, and its refreshes run in a worker."""
    if path is None:
        return []
    hint = (
        "Name a callable (previous_summary, turns) -> str, such as memory.recall.summarize "
        "(the default), or None to turn summaries off."
    )
    try:
        callable_import("SUMMARIZER", path)
    except ImproperlyConfigured as e:
        return [Error(str(e), hint=hint, id="memory.E024")]
    subject = f"MEMORY['SUMMARIZER'] is {path!r}"
    missing = Warning(
        f"{subject}, but django-tasks is not installed: no summary refresh runs by itself.",
        hint=f"{extra_install('deferred')}, a task backend, and set TASKS; or run `manage.py "
        "memory_summarize --pending` periodically; or set MEMORY['SUMMARIZER'] = None.",
        id="memory.W012",
    )
    consequence = "a summary refresh runs inside the request whose append made it due."
    return worker_checks(missing, subject, consequence, "memory.W013")


def _check_resolver(path: Any) -> list[CheckMessage]:
    if not isinstance(path, str):
        return [
            Error(
                f"MEMORY['OWNER_RESOLVER'] must be a dotted path string, not {path!r}.",
                id="memory.E006",
            )
        ]
    try:
        resolver = setting_import("OWNER_RESOLVER", path)
    except ImproperlyConfigured as e:
        return [Error(str(e), id="memory.E006")]
    if not callable(resolver):
        return [
            Error(
                f"MEMORY['OWNER_RESOLVER'] {path!r} is not callable.",
                hint="Point it at a function taking a user and returning owner ids.",
                id="memory.E012",
            )
        ]
    return []


@register(Tags.caches)
def check_memory_cache(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The cache alias the app uses exists, is django-redis, and fails loudly and fast."""
    user = _user_memory()
    if not isinstance(user, dict):
        return []
    alias = user.get("CACHE_ALIAS")
    if alias is not None and not isinstance(alias, str):
        return [
            Error(
                f"MEMORY['CACHE_ALIAS'] must be the name of a cache in CACHES, not {alias!r}.",
                hint="Use a string such as 'memory', or '' for no cache.",
                id="memory.E011",
            )
        ]
    if alias is None:
        if "memory" not in settings.CACHES:
            # No cache is a supported set-up (every read from the database), not an error.
            return []
        alias = "memory"
    if alias == "":
        # As in conf.CACHE_ALIAS, an empty alias turns the cache off explicitly.
        return []
    if alias not in settings.CACHES:
        return [
            Error(
                f"MEMORY['CACHE_ALIAS'] is {alias!r}, but CACHES has no such alias.",
                hint=f"Aliases in CACHES: {', '.join(settings.CACHES) or 'none'}.",
                id="memory.E007",
            )
        ]
    config = settings.CACHES[alias]
    errors: list[CheckMessage] = []
    backend = config.get("BACKEND")
    if not str(backend or "").startswith("django_redis."):
        errors.append(
            Error(
                f"The memory cache {alias!r} must be a django-redis cache, not {backend!r}.",
                hint="Use BACKEND 'django_redis.cache.RedisCache' (pip install django-redis).",
                id="memory.E008",
            )
        )
    errors += _check_alias_prefix(alias, config, user)
    options = config.get("OPTIONS") or {}
    if options.get("IGNORE_EXCEPTIONS") or getattr(
        settings, "DJANGO_REDIS_IGNORE_EXCEPTIONS", False
    ):
        errors.append(
            Error(
                f"The memory cache {alias!r} ignores exceptions (IGNORE_EXCEPTIONS), which "
                "hides an outage as a miss.",
                hint="Remove it from that alias: the app handles Redis failures itself.",
                id="memory.E009",
            )
        )
    cluster = options.get("CLUSTER_OPTIONS") or {}
    if cluster.get("read_from_replicas") or cluster.get("load_balancing_strategy") is not None:
        errors.append(
            Error(
                f"The memory cache {alias!r} reads from replicas (CLUSTER_OPTIONS), which may "
                "serve a copy a write has already replaced.",
                hint="Remove read_from_replicas and load_balancing_strategy from that alias.",
                id="memory.E019",
            )
        )
    if not options.get("SOCKET_TIMEOUT") or not options.get("SOCKET_CONNECT_TIMEOUT"):
        errors.append(
            Warning(
                f"The memory cache {alias!r} has no SOCKET_TIMEOUT/SOCKET_CONNECT_TIMEOUT: a "
                "Redis that hangs would hang requests.",
                hint="Set both to a fraction of a second in OPTIONS.",
                id="memory.W004",
            )
        )
    vendor = connections["default"].vendor
    if vendor != "postgresql":
        errors.append(
            Warning(
                "The memory cache is coherent across processes only on PostgreSQL; this "
                f"database is {vendor}.",
                id="memory.W005",
            )
        )
    return errors


def _check_alias_prefix(
    alias: str, config: dict[str, Any], user: dict[str, Any]
) -> list[CheckMessage]:
    # NOTE: the app builds its own keys, so Django's per-alias KEY_PREFIX never reaches them.
    alias_prefix = config.get("KEY_PREFIX")
    prefix = user.get("KEY_PREFIX", DEFAULTS["KEY_PREFIX"])
    if not alias_prefix or alias_prefix == prefix:
        return []
    return [
        Error(
            f"CACHES[{alias!r}]['KEY_PREFIX'] is {alias_prefix!r}, but the memory app does not "
            f"use it: its keys start with MEMORY['KEY_PREFIX'] ({prefix!r}).",
            hint=f"Set MEMORY['KEY_PREFIX'] = {alias_prefix!r} and remove KEY_PREFIX from the "
            f"cache alias {alias!r}.",
            id="memory.E017",
        )
    ]


@register(Tags.database)
def check_memory_dot_keys(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """No fact has a key made only of dots: its URL collapses to the owner's (``facts/../``). Fixed
    by ``memory_fact_keys --rename``."""
    from django.db import DatabaseError, connections, router

    from memory.exceptions import MemoryUnavailable
    from memory.models import Fact

    alias = router.db_for_read(Fact)
    if alias not in (databases or ()):
        return []
    try:
        # NOTE: migrate runs database checks before it migrates: no table yet is no warning
        # (and no "database unavailable" in the log of a new site's first migrate).
        with connections[alias].cursor() as cursor:
            if Fact._meta.db_table not in connections[alias].introspection.table_names(cursor):
                return []
        found = len(fact_dot_key_list(limit=101))
    except (DatabaseError, MemoryUnavailable):
        return []
    if not found:
        return []
    # NOTE: a count, not the owners: check output ends up in deploy logs.
    count = found if found <= 100 else "more than 100"
    return [
        Warning(
            f"Facts whose key is made only of dots: {count}. A client's URL of such a fact "
            "(facts/../) collapses to the user's own, where a DELETE forgets the user; the "
            "API no longer reaches them.",
            hint="List them with python manage.py memory_fact_keys, and rename them with "
            "--rename (. -> dot, .. -> dotdot, ... -> dots-3).",
            id="memory.W010",
        )
    ]
