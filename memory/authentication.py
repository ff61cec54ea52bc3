"""DRF authentication for the memory API: DRF's token authentication, which on the app's own
views also answers the permission check in the same statement (``memory.postgres.token_lookup``)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import connections, router
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from memory.permissions import ACCESS_ALL, HOLDS_ACCESS_ALL, CanReachOwner
from memory.postgres.token_lookup import token_lookup


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's ``TokenAuthentication`` with the same answers; on a view that checks ``CanReachOwner``,
    one statement reads the token, its user and whether they hold ``memory.access_all_memories``
    (two with DRF). With a site's own token or user model, or off PostgreSQL, DRF's class as is."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        # NOTE: DRF makes one instance per request, so the view may be kept on it till
        # authenticate_credentials, which is given only the key.
        view = (getattr(request, "parser_context", None) or {}).get("view")
        self.reach_checked = any(
            isinstance(permission, type) and issubclass(permission, CanReachOwner)
            for permission in getattr(view, "permission_classes", ())
        )
        return super().authenticate(request)

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        # NOTE: imported here, as DRF's class does: a site without rest_framework.authtoken
        # installed may still import this module.
        from rest_framework.authtoken.models import Token

        model = self.get_model()
        alias = router.db_for_read(model)
        if (
            not getattr(self, "reach_checked", False)
            or model is not Token
            or Token.user.field.related_model is not User
            or connections[alias].vendor != "postgresql"
        ):
            return super().authenticate_credentials(key)
        if "\x00" in key:
            # NOTE: no token holds one, and PostgreSQL refuses it in a text parameter.
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        found = token_lookup(alias=alias, key=key, permission=ACCESS_ALL)
        if found is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        token, user, held = found
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        setattr(user, HOLDS_ACCESS_ALL, held)
        return user, token
