"""The app's settings: one ``MEMORY`` dict in the host's settings, read here on every access."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # The django-redis alias in CACHES; None means "memory" if that alias exists, else no cache.
    "CACHE_ALIAS": None,
    # Seconds an owner's cached memory lives after its last use (sliding).
    "CACHE_TTL": 3600,
    # Turns kept in an owner's cached copy; a context asking for more reads the database.
    "CACHE_TURNS": 50,
    # Turns in a context when the caller does not say.
    "CONTEXT_TURNS": 20,
    # Most turns a caller may ask for in one context.
    "MAX_CONTEXT_TURNS": 200,
    # Longest turn content accepted, in characters.
    "MAX_TURN_CHARS": 32768,
    # Largest metadata object or fact value accepted, in bytes of JSON.
    "MAX_JSON_BYTES": 16384,
    # Prefix of every Redis key the app writes.
    "KEY_PREFIX": "memory",
    # Seconds between two checks, per process, for owners whose cache update did not land.
    "RECONCILE_INTERVAL": 1.0,
    # Seconds a write's own cache update may take before other processes drop that copy.
    "RECONCILE_GRACE": 2.0,
    # Seconds after a Redis error during which every cached read is first reconciled.
    "SUSPECT_WINDOW": 10.0,
    # Milliseconds a cold reader waits for another process's rehydration before reading itself.
    "FILL_WAIT_MS": 200,
    # Dotted path of the callable mapping a request's user to the owner ids they may reach.
    "OWNER_RESOLVER": "memory.permissions.default_owner_id",
    # Dotted path of the fact extractor run on each user turn (docs/extraction.md); None: off.
    "FACT_EXTRACTOR": "memory.extraction.RuleBasedExtractor",
    # Bearer token that lets a scraper read the metrics view (docs/metrics.md); None: only
    # service callers may.
    "METRICS_TOKEN": None,
}


class Settings:
    """Typed access to ``settings.MEMORY``; every property re-reads the host's settings."""

    def _get(self, name: str) -> Any:
        user = getattr(settings, "MEMORY", None) or {}
        return user.get(name, DEFAULTS[name])

    @property
    def CACHE_ALIAS(self) -> str | None:
        alias = self._get("CACHE_ALIAS")
        if alias is None and "memory" in settings.CACHES:
            return "memory"
        return alias or None

    @property
    def CACHE_TTL(self) -> int:
        return self._get("CACHE_TTL")  # type: ignore[no-any-return]

    @property
    def CACHE_TURNS(self) -> int:
        return self._get("CACHE_TURNS")  # type: ignore[no-any-return]

    @property
    def CONTEXT_TURNS(self) -> int:
        return self._get("CONTEXT_TURNS")  # type: ignore[no-any-return]

    @property
    def MAX_CONTEXT_TURNS(self) -> int:
        return self._get("MAX_CONTEXT_TURNS")  # type: ignore[no-any-return]

    @property
    def MAX_TURN_CHARS(self) -> int:
        return self._get("MAX_TURN_CHARS")  # type: ignore[no-any-return]

    @property
    def MAX_JSON_BYTES(self) -> int:
        return self._get("MAX_JSON_BYTES")  # type: ignore[no-any-return]

    @property
    def KEY_PREFIX(self) -> str:
        return self._get("KEY_PREFIX")  # type: ignore[no-any-return]

    @property
    def RECONCILE_INTERVAL(self) -> float:
        return float(self._get("RECONCILE_INTERVAL"))

    @property
    def RECONCILE_GRACE(self) -> float:
        return float(self._get("RECONCILE_GRACE"))

    @property
    def SUSPECT_WINDOW(self) -> float:
        return float(self._get("SUSPECT_WINDOW"))

    @property
    def FILL_WAIT_MS(self) -> int:
        return self._get("FILL_WAIT_MS")  # type: ignore[no-any-return]

    @property
    def OWNER_RESOLVER(self) -> str:
        return self._get("OWNER_RESOLVER")  # type: ignore[no-any-return]

    @property
    def FACT_EXTRACTOR(self) -> str | None:
        return self._get("FACT_EXTRACTOR")  # type: ignore[no-any-return]

    @property
    def METRICS_TOKEN(self) -> str | None:
        token = self._get("METRICS_TOKEN")
        # NOTE: an empty or non-string token never matches (memory.E014 names it).
        return token if isinstance(token, str) and token else None


conf = Settings()
