"""Who may reach which owner's memory: the owner-id mapping and the DRF permission classes."""

from __future__ import annotations

import functools
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.http import Http404
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from memory.conf import conf, setting_import

ACCESS_ALL = "memory.access_all_memories"


def default_owner_id(user: AbstractBaseUser | AnonymousUser) -> str | None:
    """The owner id an ordinary user may reach: their username (``OWNER_RESOLVER`` default)."""
    if not user.is_authenticated:
        return None
    return user.get_username()


def owner_id_for(user: AbstractBaseUser | AnonymousUser) -> str | None:
    """Apply ``MEMORY["OWNER_RESOLVER"]``; an unimportable path names the setting."""
    resolver = setting_import("OWNER_RESOLVER", conf.OWNER_RESOLVER)
    return resolver(user)  # type: ignore[no-any-return]


def _is_active_user(user: AbstractBaseUser | AnonymousUser) -> bool:
    # NOTE: an inactive account reaches nothing, even when an authentication class (or a test's
    # force_authenticate) let it through; ``is_active`` is optional on custom user models.
    return bool(user.is_authenticated and getattr(user, "is_active", True))


MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


# NOTE: where ``memory.authentication.TokenAuthentication`` leaves the answer of its one
# statement on the user it authenticated: whether they hold ``ACCESS_ALL`` by row (directly or
# through a group), for ``is_service_caller``; absent on a user any other way authenticated.
HOLDS_ACCESS_ALL = "_memory_holds_access_all"


def is_service_caller(user: AbstractBaseUser | AnonymousUser) -> bool:
    """Holders of ``memory.access_all_memories`` (superusers hold every permission) reach every
    owner; ``is_staff`` alone grants nothing."""
    if not _is_active_user(user):
        return False
    if getattr(user, "is_superuser", False):
        return True
    if list(settings.AUTHENTICATION_BACKENDS) == [MODEL_BACKEND] and isinstance(user, User):
        # NOTE: what ModelBackend.has_perm answers for this one permission, in one EXISTS
        # query (or none, when the authentication's statement answered it already); has_perm
        # loads every permission of the user and of their groups (two queries and a set of all
        # their names), which was half of an API request's time.
        held = getattr(user, HOLDS_ACCESS_ALL, None)
        return held if held is not None else _holds_access_all(user)
    return bool(user.has_perm(ACCESS_ALL))


def _holds_access_all(user: User) -> bool:
    app_label, codename = ACCESS_ALL.split(".")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {holds_sql('%s')}", [app_label, codename, user.pk, user.pk])
        return bool(cursor.fetchone()[0])


@functools.cache
def holds_sql(user_id: str) -> str:
    """An SQL boolean: whether the ``auth.User`` whose id is the SQL ``user_id`` holds the
    permission named by two parameters, app label then codename, directly or through a group
    (what ``ModelBackend`` reads for an active non-superuser). ``user_id`` is a column of an
    enclosing query, or ``%s``: then the user's id is the third and the fourth parameter."""
    q = connection.ops.quote_name
    permission = q(Permission._meta.db_table)
    content_type = q(ContentType._meta.db_table)
    direct = q(User.user_permissions.through._meta.db_table)
    member = q(User.groups.through._meta.db_table)
    granted = q(Group.permissions.through._meta.db_table)
    # NOTE: semi-joins rather than the joins of one EXISTS per path: the planner's work is most
    # of this statement's time (Django sends the text every time), and this plans in less.
    return (
        f"EXISTS (SELECT 1 FROM {permission} p WHERE p.content_type_id IN"
        f" (SELECT ct.id FROM {content_type} ct WHERE ct.app_label = %s) AND p.codename = %s"
        f" AND (p.id IN (SELECT d.permission_id FROM {direct} d WHERE d.user_id = {user_id})"
        f" OR p.id IN (SELECT g.permission_id FROM {granted} g WHERE g.group_id IN"
        f" (SELECT m.group_id FROM {member} m WHERE m.user_id = {user_id}))))"
    )


def can_reach(user: AbstractBaseUser | AnonymousUser, owner_id: str) -> bool:
    """Whether ``user`` may read and write the memory of ``owner_id``: their own (through
    ``MEMORY["OWNER_RESOLVER"]``), or any as a service caller; never for an inactive user."""
    if not _is_active_user(user):
        return False
    # NOTE: the caller's own id first: it costs no permission query, as has_perm does.
    return owner_id_for(user) == owner_id or is_service_caller(user)


class CanReachOwner(BasePermission):
    """The caller reaches the ``user_id`` of the URL; anyone else's memory is a 404."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not request.user or not _is_active_user(request.user):
            return False
        owner_id = view.kwargs.get("user_id")
        if owner_id is not None and not can_reach(request.user, owner_id):
            # NOTE: 404, not 403: a stranger learns nothing, not even that the owner exists.
            raise Http404
        return True
