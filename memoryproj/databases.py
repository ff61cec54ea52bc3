"""``DATABASE_URL`` as the demo reads it: what dj-database-url parses, and libpq's multi-host
form, which it refuses (``postgres://user@host1:5432,host2:5432/name?target_session_attrs=
read-write``): ``HOST`` and ``PORT`` become libpq's comma-separated lists, so that a failover
to another host needs no change of configuration and no restart."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured


def database_parse(url: str, **kwargs: Any) -> dict[str, Any]:
    """Django's ``DATABASES`` entry for ``url``; ``kwargs`` as ``dj_database_url.parse``'s.

    Raises ``ImproperlyConfigured`` for a multi-host URL whose hosts lack a port, or that is
    not PostgreSQL's.
    """
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    if "," not in hosts:
        return dict(dj_database_url.parse(url, **kwargs))
    if parts.scheme not in ("postgres", "postgresql", "pgsql"):
        raise ImproperlyConfigured(
            f"DATABASE_URL names several hosts, which only PostgreSQL (libpq) takes, not "
            f"{parts.scheme!r}."
        )
    names, ports = [], []
    for host in hosts.split(","):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise ImproperlyConfigured(
                f"DATABASE_URL: each of its hosts needs a port (host:port), not {host!r}."
            )
        names.append(name)
        ports.append(port)
    at = f"{userinfo}@" if userinfo else ""
    first = parts._replace(netloc=f"{at}{names[0]}:{ports[0]}")
    config: dict[str, Any] = dict(dj_database_url.parse(first.geturl(), **kwargs))
    config["HOST"], config["PORT"] = ",".join(names), ",".join(ports)
    return config
