"""Logging of the demo without what its users typed: request lines and paths keep no query
string (search text, ``user_id=``) and no owner id (``users/{user_id}/``).

``RedactRequests`` is a filter; the settings' ``LOGGING`` puts it on ``django.request`` (the 5xx
lines) and ``django.server`` (runserver's access log), and the entry points (``memoryproj.wsgi``,
``memoryproj.asgi``) on ``gunicorn.access`` and ``uvicorn.access``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import MutableMapping
from typing import Any

# NOTE: the owner id is the path segment after "users/" (the memory API, a host site's own).
USERS_RE = re.compile(r"(/users/)[^/?#\s\"]+")
QUERY_RE = re.compile(r"\?[^\s\"]*")
# gunicorn's atoms that hold nothing but a query string.
QUERY_ATOMS = frozenset({"q"})


def redact(text: str) -> str:
    """``text`` (a path, a request line, a URL, a log line) with query strings dropped and
    every owner id as ``{user_id}``."""
    return USERS_RE.sub(r"\1{user_id}", QUERY_RE.sub("", text))


def _redacted(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


class RedactRequests(logging.Filter):
    """Redacts a record's arguments (Django's and uvicorn's request lines and paths, gunicorn's
    access atoms) and, where it has none, its message; drops no record."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, MutableMapping):
            # NOTE: gunicorn's atoms, a dict of its own class (missing ones read as "-"): changed
            # in place so that the format still finds every atom.
            for key, value in list(args.items()):
                args[key] = "" if key in QUERY_ATOMS else _redacted(value)
        elif isinstance(args, tuple):
            record.args = tuple(_redacted(value) for value in args)
        elif not args and isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def install() -> None:
    """Put ``RedactRequests`` on the ASGI and WSGI servers' access loggers (each server writes
    its own, outside Django's ``LOGGING``); once per process."""
    for name in ("gunicorn.access", "uvicorn.access"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactRequests) for f in logger.filters):
            logger.addFilter(RedactRequests())
