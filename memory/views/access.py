"""An append's checks deferred into the append's own statement: ``append_access`` decides
where that answers as DRF's checks would, and ``TokenAccess`` ends them as DRF would have."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS, connections, router
from django.utils.translation import gettext_lazy as _
from rest_framework import HTTP_HEADER_ENCODING, exceptions, throttling
from rest_framework.request import Request
from rest_framework.views import APIView

from memory.authentication import TokenAuthentication
from memory.conf import conf, setting_import
from memory.extraction.base import extractor_deferred, extractor_get
from memory.extraction.rules import RuleBasedExtractor
from memory.permissions import (
    ACCESS_ALL,
    HOLDS_ACCESS_ALL,
    MODEL_BACKEND,
    CanReachOwner,
    default_owner_id,
)
from memory.views.base import request_header


class TokenAccess:
    """``memory.appends.AppendAccess`` of a request whose view deferred DRF's checks (see
    ``append_access``): ``settle`` and ``require`` end them as ``APIView.initial`` would have,
    with the same exceptions."""

    permission = ACCESS_ALL

    def __init__(
        self, request: Request, view: APIView, authenticator: TokenAuthentication, key: str
    ) -> None:
        self.request, self.view, self.authenticator, self.key = request, view, authenticator, key
        self.settled = False

    def settle(self, found: tuple[Any, Any, bool] | None) -> None:
        if self.settled:
            return
        self.settled = True
        request = self.request
        if found is None or not found[1].is_active:
            request._not_authenticated()  # type: ignore[attr-defined]
            if found is None:
                raise exceptions.AuthenticationFailed(_("Invalid token."))
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        token, user, held = found
        setattr(user, HOLDS_ACCESS_ALL, held)
        request._authenticator = self.authenticator  # type: ignore[attr-defined]
        request.user, request.auth = user, token
        APIView.check_permissions(self.view, request)
        APIView.check_throttles(self.view, request)

    def require(self) -> None:
        if self.settled:
            return
        self.settled = True
        APIView.perform_authentication(self.view, self.request)
        APIView.check_permissions(self.view, self.request)
        APIView.check_throttles(self.view, self.request)


def append_access(request: Request, view: APIView) -> TokenAccess | None:
    """The deferred checks of ``view``'s append, or ``None`` (then DRF checks first, as ever).

    Deferred only where the append's statement answers as DRF would: the app's token
    authentication first, a ``Token`` header, the stock token and user on the default
    PostgreSQL database, ``CanReachOwner`` alone under ``ModelBackend`` alone with the default
    ``OWNER_RESOLVER``, no per-user rate, no query string, and an extractor that runs no code
    of a site's before the caller is known (the built-in one, or a deferred one).
    """
    from rest_framework.authtoken.models import Token

    authenticators = request.authenticators
    if not authenticators or type(authenticators[0]) is not TokenAuthentication:
        return None
    authenticator = authenticators[0]
    # NOTE: DRF's get_authorization_header, read from META: request.headers would be built.
    header = request_header(request, "Authorization") or b""
    if isinstance(header, str):
        header = header.encode(HTTP_HEADER_ENCODING)
    header = header.split()
    if len(header) != 2 or header[0].lower() != authenticator.keyword.lower().encode():
        return None
    try:
        key = header[1].decode()
    except UnicodeError:
        return None
    db = connections[DEFAULT_DB_ALIAS]
    if (
        "\x00" in key
        or request.META.get("QUERY_STRING")
        or authenticator.get_model() is not Token
        or Token.user.field.related_model is not User
        or router.db_for_read(Token) != DEFAULT_DB_ALIAS
        or db.vendor != "postgresql"
        or db.in_atomic_block
        or list(view.permission_classes) != [CanReachOwner]
        or list(settings.AUTHENTICATION_BACKENDS) != [MODEL_BACKEND]
        or setting_import("OWNER_RESOLVER", conf.OWNER_RESOLVER) is not default_owner_id
        or not all(_no_user_rate(throttle) for throttle in view.get_throttles())
    ):
        return None
    extractor = extractor_get()
    if not (
        extractor is None or type(extractor) is RuleBasedExtractor or extractor_deferred(extractor)
    ):
        return None
    return TokenAccess(request, view, authenticator, key)


def _no_user_rate(throttle: Any) -> bool:
    """Whether ``throttle`` lets every request of a token's user through: DRF's anonymous
    throttle (it counts no authenticated user), or a rate throttle without a rate."""
    if isinstance(throttle, throttling.AnonRateThrottle):
        return True
    return (
        isinstance(throttle, throttling.SimpleRateThrottle)
        and getattr(throttle, "rate", "") is None
    )
