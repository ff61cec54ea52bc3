"""Who may reach which owner's memory: the owner-id mapping and the DRF permission classes."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.http import Http404
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from memory.conf import conf, setting_import
from memory.postgres.permission_held import permission_held

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
    # NOTE: an inactive account reaches nothing, whatever let it through.
    return bool(user.is_authenticated and getattr(user, "is_active", True))


MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


# NOTE: set by ``memory.authentication.TokenAuthentication``: whether the user holds ``ACCESS_ALL``
# (directly or by group), for ``is_service_caller``.
HOLDS_ACCESS_ALL = "_memory_holds_access_all"


def is_service_caller(user: AbstractBaseUser | AnonymousUser) -> bool:
    """Holders of ``memory.access_all_memories`` (superusers hold every permission) reach every
    owner; ``is_staff`` alone grants nothing."""
    if not _is_active_user(user):
        return False
    if getattr(user, "is_superuser", False):
        return True
    if list(settings.AUTHENTICATION_BACKENDS) == [MODEL_BACKEND] and isinstance(user, User):
        # NOTE: ModelBackend.has_perm for this one permission in one EXISTS query (or none, when the
        # authentication answered it): has_perm loads every permission, half a request's time.
        held = getattr(user, HOLDS_ACCESS_ALL, None)
        return held if held is not None else permission_held(user=user, permission=ACCESS_ALL)
    # NOTE: a custom user model without PermissionsMixin has no has_perm, as the stubs say.
    return bool(user.has_perm(ACCESS_ALL))  # type: ignore[union-attr]


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
