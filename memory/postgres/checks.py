"""System checks of the databases the app reads and writes: a primary among several hosts, and
a read replica that is one.

E031 READ_DATABASE is not None or an alias in DATABASES, or names the default (the primary)
E032 a database names several hosts without target_session_attrs=read-write
E033 a router sends the app's writes to READ_DATABASE (a replica)
E034 a router sends the app's reads to another database than its writes (a replica)
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register


def _user_memory() -> Any:
    return getattr(settings, "MEMORY", None) or {}


# libpq's values of target_session_attrs that connect only to a server that takes writes.
WRITABLE_SESSION_ATTRS = ("read-write", "primary")


@register(Tags.compatibility)
def check_memory_databases(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A read replica that is one (``READ_DATABASE``), and a primary found among several hosts."""
    from django.apps import apps
    from django.db import DEFAULT_DB_ALIAS, router

    errors: list[CheckMessage] = []
    read = _user_memory().get("READ_DATABASE") if isinstance(_user_memory(), dict) else None
    if read is not None and (not isinstance(read, str) or read not in settings.DATABASES):
        errors.append(
            Error(
                f"MEMORY['READ_DATABASE'] must be None or an alias in DATABASES, not {read!r}.",
                hint="Add the replica to DATABASES under that alias, or set it to None.",
                id="memory.E031",
            )
        )
        read = None
    elif read == DEFAULT_DB_ALIAS:
        errors.append(
            Error(
                f"MEMORY['READ_DATABASE'] names {DEFAULT_DB_ALIAS!r}, the primary the app writes "
                "to: there is no replica to read from.",
                hint="Name the replica's alias in DATABASES, or set it to None.",
                id="memory.E031",
            )
        )
        read = None
    for alias, config in settings.DATABASES.items():
        if "postgresql" not in str(config.get("ENGINE", "")):
            continue
        attrs = (config.get("OPTIONS") or {}).get("target_session_attrs")
        if (
            alias != read
            and "," in str(config.get("HOST") or "")
            and (attrs not in WRITABLE_SESSION_ATTRS)
        ):
            errors.append(
                Error(
                    f"DATABASES[{alias!r}] names several hosts ({config['HOST']}) but not "
                    "target_session_attrs=read-write: after a failover the app may connect to a "
                    "standby, where every write fails.",
                    hint=f"Set DATABASES[{alias!r}]['OPTIONS']['target_session_attrs'] = "
                    "'read-write' (in a URL: ?target_session_attrs=read-write).",
                    id="memory.E032",
                )
            )
    for model in apps.get_app_config("memory").get_models():
        # NOTE: a lagging replica would feed reads the stamp rule cannot check: reads follow writes.
        reads, writes = router.db_for_read(model), router.db_for_write(model)
        if reads != writes:
            errors.append(
                Error(
                    f"A database router sends reads of {model._meta.label} to {reads!r} and "
                    f"its writes to {writes!r}: a replica that is behind would serve reads "
                    "without the user's last write.",
                    hint="Return None from db_for_read for app label 'memory', and name the "
                    "replica in MEMORY['READ_DATABASE']: the app reads from it only what it "
                    "holds up to the owner's last write.",
                    id="memory.E034",
                )
            )
            break
    if read is not None:
        for model in apps.get_app_config("memory").get_models():
            if router.db_for_write(model) == read:
                errors.append(
                    Error(
                        f"A database router sends writes of {model._meta.label} to "
                        f"{read!r}, MEMORY['READ_DATABASE'], a replica.",
                        hint="Route the app's writes to the primary (db_for_write returns "
                        f"{DEFAULT_DB_ALIAS!r} or None for app label 'memory').",
                        id="memory.E033",
                    )
                )
                break
    return errors
