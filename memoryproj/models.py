"""The demo project's own table: failed logins, for the login page's throttle
(``memoryproj.logins``)."""

from __future__ import annotations

from django.db import models


class LoginFailure(models.Model):
    """One failed login: when, and a keyed digest of the client address and username (neither
    is stored as it is)."""

    key = models.CharField(max_length=64)
    at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["key", "at"], name="memoryproj_loginfail_key_at"),
            models.Index(fields=["at"], name="memoryproj_loginfail_at"),
        ]
        default_permissions = ()

    def __str__(self) -> str:
        return f"failed login at {self.at:%Y-%m-%d %H:%M:%S}"
