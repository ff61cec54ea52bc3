"""Whether an ``auth.User`` holds one permission, in one SQL ``EXISTS``: what Django's
``ModelBackend.has_perm`` answers for an active non-superuser (its specification), without
loading every permission of the user and of their groups. Plain SQL: any database runs it."""

from __future__ import annotations

import functools

from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection


def permission_held(*, user: User, permission: str) -> bool:
    """Whether ``user`` holds ``permission`` ("app_label.codename") by row, directly or
    through a group; ``is_active`` and ``is_superuser`` are the caller's to check."""
    app_label, codename = permission.split(".")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {holds_sql('%s')}", [app_label, codename, user.pk, user.pk])
        return bool(cursor.fetchone()[0])


@functools.cache
def holds_sql(user_id: str) -> str:
    """An SQL boolean: whether the ``auth.User`` whose id is ``user_id`` (a column of an enclosing
    query, or ``%s``: then the third and fourth parameter) holds the permission named by two
    parameters, app label then codename, directly or through a group."""
    q = connection.ops.quote_name
    permission = q(Permission._meta.db_table)
    content_type = q(ContentType._meta.db_table)
    direct = q(User.user_permissions.through._meta.db_table)
    member = q(User.groups.through._meta.db_table)
    granted = q(Group.permissions.through._meta.db_table)
    # NOTE: semi-joins, not one EXISTS per path: planning is most of this statement's time.
    return (
        f"EXISTS (SELECT 1 FROM {permission} p WHERE p.content_type_id IN"
        f" (SELECT ct.id FROM {content_type} ct WHERE ct.app_label = %s) AND p.codename = %s"
        f" AND (p.id IN (SELECT d.permission_id FROM {direct} d WHERE d.user_id = {user_id})"
        f" OR p.id IN (SELECT g.permission_id FROM {granted} g WHERE g.group_id IN"
        f" (SELECT m.group_id FROM {member} m WHERE m.user_id = {user_id}))))"
    )
