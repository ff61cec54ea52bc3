"""Running async code from a sync test as an async program would."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    """``asyncio.run(main())``; then the connection of the thread that served its sync code is
    closed, so that the test database can be flushed and dropped."""

    async def program() -> Any:
        try:
            return await main()
        finally:
            await sync_to_async(connections.close_all, thread_sensitive=True)()

    return asyncio.run(program())
