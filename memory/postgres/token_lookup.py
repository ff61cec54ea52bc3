"""DRF's token lookup and the permission check in one statement (their specification: DRF's
``TokenAuthentication`` and ``memory.postgres.permission_held``, two statements)."""

from __future__ import annotations

import functools
from typing import Any

from django.contrib.auth.models import User
from django.db import connections
from django.db.models import Field

from memory.db import prepared_fetchone
from memory.postgres.permission_held import holds_sql


def token_lookup(*, alias: str, key: str, permission: str) -> tuple[Any, User, bool] | None:
    """The ``authtoken.Token`` of ``key`` with its ``user`` loaded, and whether that user holds
    ``permission`` ("app_label.codename") by row; ``None`` when no token has that key. For the
    stock ``Token`` and ``auth.User`` only; ``key`` holds no NUL (PostgreSQL refuses one)."""
    from rest_framework.authtoken.models import Token

    app_label, codename = permission.split(".")
    # NOTE: prepared: its plan (six tables) was most of its time (memory.db); and the
    # connection's health check, a round trip less on each request.
    row = prepared_fetchone(
        connections[alias], _token_sql(alias), [app_label, codename, key], read_only=True
    )
    if row is None:
        return None
    token_names, user_names = _attnames()
    token = Token.from_db(alias, token_names, row[: len(token_names)])
    user = User.from_db(alias, user_names, row[len(token_names) : -1])
    token.user = user
    return token, user, bool(row[-1])


@functools.cache
def _attnames() -> tuple[list[str], list[str]]:
    """The token's and the user's fields, in the order of ``_token_sql``'s columns."""
    from rest_framework.authtoken.models import Token

    return (
        [f.attname for f in Token._meta.concrete_fields],
        [f.attname for f in User._meta.concrete_fields],
    )


def _column(field: Field[Any, Any]) -> str:
    """A concrete field's column (``Field.column`` is None only on a field without one)."""
    assert field.column is not None
    return field.column


@functools.cache
def _token_sql(alias: str) -> str:
    """The statement of ``token_lookup``: the token's and its user's columns in field order, then
    ``holds_sql``; parameters: app label, codename, key."""
    from rest_framework.authtoken.models import Token

    q = connections[alias].ops.quote_name
    columns = [f"t.{q(_column(f))}" for f in Token._meta.concrete_fields]
    columns += [f"u.{q(_column(f))}" for f in User._meta.concrete_fields]
    user_id = f"u.{q(_column(User._meta.pk))}"
    return (
        f"SELECT {', '.join(columns)}, {holds_sql(user_id)}"
        f" FROM {q(Token._meta.db_table)} t JOIN {q(User._meta.db_table)} u"
        f" ON {user_id} = t.{q(Token.user.field.column)}"
        f" WHERE t.{q(_column(Token._meta.pk))} = %s"
    )
