"""The demo's django-tasks tasks, run by its worker (``manage.py db_worker``)."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django_tasks import task

from memory import ops

# The owner ids of the chat page's anonymous visitors start with it (memoryproj.anonymous).
ANON_PREFIX = "anon-"


@task()
def anon_sweep() -> int:
    """Forget the chat page's anonymous memories that nobody wrote to for
    ``MEMORYPROJ_ANON_RETENTION_DAYS`` days, through the forget service (the cached copies
    go too); return how many went. Raises ``MemoryUnavailable`` when the database cannot be
    reached; the next enqueue tries again."""
    return ops.owners_forget_idle(
        prefix=ANON_PREFIX, idle_for=dt.timedelta(days=settings.MEMORYPROJ_ANON_RETENTION_DAYS)
    )
