"""The app config: registers the system checks and the cache safety-net signal receivers, and
holds the hook that guards a delete of turns made through the ORM."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Conversation memory"
    default_auto_field = "django.db.models.BigAutoField"
    # What wraps an ORM delete of turns: ``cache.orm_delete``, which marks the owners and drops
    # their copies after commit.
    orm_delete_guard: Callable[[Callable[[], Iterable[int]]], AbstractContextManager[None]]

    def ready(self) -> None:
        from django.core.signals import request_started

        from memory import cache, checks, signals  # noqa: F401  (registers checks and receivers)
        from memory.conf import conf
        from memory.postgres import checks as database_checks  # noqa: F401  (the databases')
        from memory.recall import checks as recall_checks  # noqa: F401  (search by meaning's)

        self.orm_delete_guard = cache.orm_delete

        # NOTE: memory.W011 at run time too: a site served by uvicorn need not say so.
        request_started.connect(checks.asgi_request_started, dispatch_uid=checks.ASGI_RECEIVER)

        # NOTE: under any server, not only manage.py: a bad MEMORY value stops the start.
        conf.validate()
