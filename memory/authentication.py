"""DRF authentication for the memory API: DRF's token authentication, which on the app's own
views also answers the permission check in the same statement (``memory.permissions``)."""

from __future__ import annotations

import functools
from typing import Any

from django.contrib.auth.models import User
from django.db import connections, router
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from memory.db import prepared_fetchone
from memory.permissions import ACCESS_ALL, HOLDS_ACCESS_ALL, CanReachOwner, holds_sql


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's ``TokenAuthentication`` (``Authorization: Token <key>``, the same answers); on a
    view that checks ``CanReachOwner``, one statement reads the token, its user and whether
    that user holds ``memory.access_all_memories``, which DRF's query and the permission's
    would take two statements (and the ORM's query building) to say. Anywhere else, with a
    token model or user model of a site's own, or off PostgreSQL, it is DRF's class as is."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        # NOTE: DRF makes one instance per request, so the view may be kept on it till
        # authenticate_credentials, which is given only the key.
        view = (getattr(request, "parser_context", None) or {}).get("view")
        self.reach_checked = any(
            isinstance(permission, type) and issubclass(permission, CanReachOwner)
            for permission in getattr(view, "permission_classes", ())
        )
        return super().authenticate(request)  # type: ignore[no-any-return]

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
            return super().authenticate_credentials(key)  # type: ignore[no-any-return]
        if "\x00" in key:
            # NOTE: no token holds one, and PostgreSQL refuses it in a text parameter.
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        app_label, codename = ACCESS_ALL.split(".")
        # NOTE: prepared: its plan (six tables) was most of its time (memory.db); and the
        # connection's health check, a round trip less on each request.
        row = prepared_fetchone(
            connections[alias], _token_sql(alias), [app_label, codename, key], read_only=True
        )
        if row is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        token_names, user_names = _attnames()
        token = Token.from_db(alias, token_names, row[: len(token_names)])
        user = User.from_db(alias, user_names, row[len(token_names) : -1])
        token.user = user
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        setattr(user, HOLDS_ACCESS_ALL, bool(row[-1]))
        return user, token


@functools.cache
def _attnames() -> tuple[list[str], list[str]]:
    """The token's and the user's fields, in the order of ``_token_sql``'s columns."""
    from rest_framework.authtoken.models import Token

    return (
        [f.attname for f in Token._meta.concrete_fields],
        [f.attname for f in User._meta.concrete_fields],
    )


@functools.cache
def _token_sql(alias: str) -> str:
    """The statement of ``authenticate_credentials``: every column of the token and of its user
    (as ``select_related("user")`` reads them, in the models' field order), then the user's
    ``holds_sql``; parameters: app label, codename, key."""
    from rest_framework.authtoken.models import Token

    q = connections[alias].ops.quote_name
    columns = [f"t.{q(f.column)}" for f in Token._meta.concrete_fields]
    columns += [f"u.{q(f.column)}" for f in User._meta.concrete_fields]
    user_id = f"u.{q(User._meta.pk.column)}"
    return (
        f"SELECT {', '.join(columns)}, {holds_sql(user_id)}"
        f" FROM {q(Token._meta.db_table)} t JOIN {q(User._meta.db_table)} u"
        f" ON {user_id} = t.{q(Token.user.field.column)}"
        f" WHERE t.{q(Token._meta.pk.column)} = %s"
    )
