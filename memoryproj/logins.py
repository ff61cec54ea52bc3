"""The demo's login throttle: failed logins counted in the database per client address and
username, at most ``MEMORYPROJ_LOGIN_THROTTLE`` (``MEMORY_THROTTLE_LOGIN``, default ``10/hour``)
in any window of that length; past it the login page answers 429 without checking a password.

It fails closed: the counts live in the database that holds the users, so when it cannot be
read no login is possible anyway, and the page answers 503. The client address is the one the
API's throttles use (DRF's ``NUM_PROXIES``); the Redis cache is not used.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone
from django.utils.crypto import salted_hmac
from rest_framework.throttling import BaseThrottle

from memoryproj.models import LoginFailure

# Rows of expired failures deleted by each new failure: the table stays about the size of one
# window's failures, and no login pays for more than this.
SWEEP = 100


def _rate() -> tuple[int, int] | None:
    return getattr(settings, "MEMORYPROJ_LOGIN_THROTTLE", None)


def _key(request: HttpRequest, username: str) -> str:
    # NOTE: keyed with SECRET_KEY, so that the table names no address or username.
    # NOTE: get_ident reads only META, which a plain HttpRequest has as a DRF Request does.
    ident = BaseThrottle().get_ident(request)  # type: ignore[arg-type]
    return salted_hmac("memoryproj.login", f"{ident}\n{username.casefold()}").hexdigest()


def login_wait(request: HttpRequest, username: str) -> int:
    """Seconds until ``username`` may try to log in again from this client; 0: now."""
    rate = _rate()
    if rate is None:
        return 0
    count, seconds = rate
    now = timezone.now()
    recent = list(
        LoginFailure.objects.filter(
            key=_key(request, username), at__gt=now - timedelta(seconds=seconds)
        )
        .order_by("-at")
        .values_list("at", flat=True)[:count]
    )
    if len(recent) < count:
        return 0
    ends: datetime = recent[-1] + timedelta(seconds=seconds)
    return max(1, math.ceil((ends - now).total_seconds()))


def login_failed(request: HttpRequest, username: str) -> None:
    """Count a failed login of ``username`` from this client; sweep some expired ones."""
    rate = _rate()
    if rate is None:
        return
    now = timezone.now()
    LoginFailure.objects.create(key=_key(request, username), at=now)
    expired = LoginFailure.objects.filter(at__lte=now - timedelta(seconds=rate[1]))
    LoginFailure.objects.filter(pk__in=expired.values("pk")[:SWEEP]).delete()


def login_cleared(request: HttpRequest, username: str) -> None:
    """``username`` logged in from this client: its failures from here no longer count."""
    LoginFailure.objects.filter(key=_key(request, username)).delete()
