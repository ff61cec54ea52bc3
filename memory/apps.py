"""The app config: registers the system checks and the cache safety-net signal receivers."""

from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Conversation memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from memory import checks, signals  # noqa: F401  (registers checks and receivers)
        from memory.conf import conf

        # NOTE: under any server, not only manage.py: a MEMORY value of the wrong type or
        # range stops the start with a message naming it (the system checks list them all).
        conf.validate()
