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

    app_label, codename = permission.split(".")
    # NOTE: prepared (planning six tables was most of its time), and the health check.
    row = prepared_fetchone(
        connections[alias], _token_sql(alias), [app_label, codename, key], read_only=True
    )
    return None if row is None else token_loaded(alias, row)


def token_loaded(alias: str, row: tuple[Any, ...]) -> tuple[Any, User, bool]:
    """The token, its user and the permission's answer from the first ``token_columns(alias)``
    values of ``row``."""
    from rest_framework.authtoken.models import Token

    token_names, user_names = _attnames()
    width = len(token_names) + len(user_names)
    token = Token.from_db(alias, token_names, row[: len(token_names)])
    user = User.from_db(alias, user_names, row[len(token_names) : width])
    token.user = user
    return token, user, bool(row[width])


def token_columns(alias: str) -> int:
    """How many columns of ``reach_sql``'s statement come before its function's: those
    ``token_loaded`` reads, then whether the caller reaches the owner."""
    token_names, user_names = _attnames()
    return len(token_names) + len(user_names) + 2


@functools.cache
def reach_sql(alias: str, function: str, args: tuple[str, ...]) -> str:
    """One statement: ``token_lookup``'s, then ``SELECT * FROM function(args)`` (one row) only
    if that token's user is active and reaches the owner as ``memory.permissions.can_reach``
    decides by default (their username, a superuser, or one holding the permission); else
    the function's columns are NULL. Parameters: the owner id, app label, codename, key, then
    those of ``args`` (the first one the owner id again). No token: no row.
    One snapshot reads the access and writes; ``OFFSET 0`` keeps the check before the call.
    """
    token_names, user_names = _attnames()
    names = [f"c{i}" for i in range(len(token_names) + len(user_names))]
    user_column = dict(zip(user_names, names[len(token_names) :], strict=True))
    active, superuser = user_column["is_active"], user_column["is_superuser"]
    username = user_column[User.USERNAME_FIELD]
    return (
        f"SELECT a.*, f.* FROM (SELECT *, {active} AND ({superuser} OR held OR {username} = %s)"
        f" AS ok FROM ({_token_sql(alias)} OFFSET 0) AS t({', '.join(names)}, held) OFFSET 0) AS a"
        f" LEFT JOIN LATERAL (SELECT * FROM {function}(CASE WHEN a.ok THEN {args[0]} END,"
        f" {', '.join(args[1:])}) WHERE a.ok OFFSET 0) AS f ON true"
    )


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
