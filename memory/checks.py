"""System checks (``manage.py check``) for the ``MEMORY`` setting and the cache alias."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections
from django.utils.module_loading import import_string

from memory.conf import DEFAULTS, conf


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


@register(Tags.compatibility)
def check_memory_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    user = getattr(settings, "MEMORY", None)
    if user is None:
        user = {}
    if not isinstance(user, dict):
        return [Error("MEMORY must be a dict.", id="memory.E001")]
    unknown = sorted(set(user) - set(DEFAULTS))
    if unknown:
        errors.append(
            Warning(
                f"MEMORY has unknown keys: {', '.join(unknown)}.",
                hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
                id="memory.W001",
            )
        )
    for name in ("CACHE_TTL", "CACHE_TURNS", "CONTEXT_TURNS", "MAX_CONTEXT_TURNS", "MAX_TURN_CHARS", "MAX_JSON_BYTES"):
        value = user.get(name, DEFAULTS[name])
        if not _positive_int(value):
            errors.append(
                Error(f"MEMORY['{name}'] must be a positive integer, not {value!r}.", id="memory.E002")
            )
    for name in ("RECONCILE_INTERVAL", "RECONCILE_GRACE", "SUSPECT_WINDOW"):
        value = user.get(name, DEFAULTS[name])
        if not _positive_number(value):
            errors.append(Error(f"MEMORY['{name}'] must be a positive number, not {value!r}.", id="memory.E003"))
    wait = user.get("FILL_WAIT_MS", DEFAULTS["FILL_WAIT_MS"])
    if not isinstance(wait, int) or isinstance(wait, bool) or wait < 0:
        errors.append(Error(f"MEMORY['FILL_WAIT_MS'] must be an integer >= 0, not {wait!r}.", id="memory.E003"))
    prefix = user.get("KEY_PREFIX", DEFAULTS["KEY_PREFIX"])
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{} \t\n"):
        errors.append(
            Error(
                f"MEMORY['KEY_PREFIX'] must be a non-empty string without braces or spaces, not {prefix!r}.",
                id="memory.E004",
            )
        )
    if not errors:
        if conf.CONTEXT_TURNS > conf.MAX_CONTEXT_TURNS:
            errors.append(
                Error("MEMORY['CONTEXT_TURNS'] exceeds MEMORY['MAX_CONTEXT_TURNS'].", id="memory.E005")
            )
        if conf.CACHE_TURNS < conf.CONTEXT_TURNS:
            errors.append(
                Warning(
                    "MEMORY['CACHE_TURNS'] is below MEMORY['CONTEXT_TURNS']: default contexts "
                    "of owners with more turns will always read the database.",
                    id="memory.W002",
                )
            )
    resolver = user.get("OWNER_RESOLVER", DEFAULTS["OWNER_RESOLVER"])
    try:
        import_string(resolver)
    except ImportError as e:
        errors.append(
            Error(f"MEMORY['OWNER_RESOLVER'] {resolver!r} cannot be imported: {e}", id="memory.E006")
        )
    return errors


@register(Tags.caches)
def check_memory_cache(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    user = getattr(settings, "MEMORY", None) or {}
    if not isinstance(user, dict):
        return []
    alias = user.get("CACHE_ALIAS")
    if alias is None:
        if "memory" not in settings.CACHES:
            # NOTE: no cache is a supported set-up (every read from the database), not an error.
            return []
        alias = "memory"
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
    if not str(config.get("BACKEND", "")).startswith("django_redis."):
        errors.append(
            Error(
                f"The memory cache {alias!r} must be a django-redis cache, not {config.get('BACKEND')!r}.",
                hint="Use BACKEND 'django_redis.cache.RedisCache'.",
                id="memory.E008",
            )
        )
    options = config.get("OPTIONS", {})
    if options.get("IGNORE_EXCEPTIONS"):
        errors.append(
            Error(
                f"The memory cache {alias!r} sets IGNORE_EXCEPTIONS, which hides an outage as a miss.",
                hint="Remove it from that alias: the app handles Redis failures itself.",
                id="memory.E009",
            )
        )
    if not options.get("SOCKET_TIMEOUT") or not options.get("SOCKET_CONNECT_TIMEOUT"):
        errors.append(
            Warning(
                f"The memory cache {alias!r} has no SOCKET_TIMEOUT/SOCKET_CONNECT_TIMEOUT: a Redis "
                "that hangs would hang requests.",
                hint="Set both to a fraction of a second in OPTIONS.",
                id="memory.W004",
            )
        )
    if connections["default"].vendor != "postgresql":
        errors.append(
            Warning(
                "The memory cache is coherent across processes only on PostgreSQL; this database "
                f"is {connections['default'].vendor}.",
                id="memory.W005",
            )
        )
    return errors
