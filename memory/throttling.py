"""DRF throttles whose counts live in the memory cache's Redis, through its breaker
(``memory.cache.window_count``): a Redis that is down or stalled costs a request nothing, and the
limits then hold per process. Drop-in for DRF's ``UserRateThrottle`` and ``AnonRateThrottle``
(same scopes, same ``DEFAULT_THROTTLE_RATES``)."""

from __future__ import annotations

from typing import Any

from rest_framework import throttling

from memory import cache


class WindowThrottle:
    """A fixed window of ``duration`` seconds per cache key, counted by ``memory.cache``: mix it
    in front of any DRF ``SimpleRateThrottle`` subclass (``class T(WindowThrottle, X)``)."""

    rate: str | None
    num_requests: int
    duration: int
    get_cache_key: Any  # DRF's, from the throttle class this is mixed into

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        count, self._left = cache.window_count(key=key, seconds=self.duration)
        return count <= self.num_requests

    def wait(self) -> float | None:
        """Seconds until the window ends (DRF's ``Retry-After``)."""
        return getattr(self, "_left", None)


class UserRateThrottle(WindowThrottle, throttling.UserRateThrottle):
    """DRF's ``UserRateThrottle`` (scope ``user``), counted through the memory cache."""


class AnonRateThrottle(WindowThrottle, throttling.AnonRateThrottle):
    """DRF's ``AnonRateThrottle`` (scope ``anon``), counted through the memory cache."""


class ScopedRateThrottle(WindowThrottle, throttling.ScopedRateThrottle):
    """DRF's ``ScopedRateThrottle`` (a view's ``throttle_scope``), counted through the memory
    cache."""

    def allow_request(self, request: Any, view: Any) -> bool:
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        self.rate = self.get_rate()
        # None with a None rate, which WindowThrottle.allow_request lets through first.
        self.num_requests, self.duration = self.parse_rate(self.rate)  # type: ignore[assignment]
        return WindowThrottle.allow_request(self, request, view)
