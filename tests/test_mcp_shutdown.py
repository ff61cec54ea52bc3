"""The demo under uvicorn exits on SIGTERM after MCP sessions over Streamable HTTP (``/mcp/``),
with a client's event stream (``GET /mcp/``) still open: an orchestrator stops a server with
SIGTERM, and a server that waits for it to be killed loses its shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import uuid

import httpx2
import pytest
from django.contrib.auth.models import User
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from rest_framework.authtoken.models import Token

from tests.chat_sockets import Instance, instance_env


async def _session(url: str, token: str) -> list[str]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(f"{url}/mcp/", http_client=http)) as client,
    ):
        await client.call_tool("remember_fact", {"key": "name", "value": "Alice"})
        return [tool.name for tool in (await client.list_tools()).tools]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_demo_exits_on_sigterm_after_mcp_sessions_with_a_stream_open() -> None:
    token = Token.objects.create(user=User.objects.create_user("alice")).key
    # NOTE: as scripts/run-demo runs it: the demo's settings, DEBUG on, its threads running.
    env = instance_env(redis_url=os.environ["REDIS_URL"], prefix=f"sigterm-{uuid.uuid4().hex[:8]}")
    server = Instance({**env, "DJANGO_DEBUG": "1"}, name="mcp-sigterm").start()
    assert server.proc is not None
    try:
        for _ in range(2):
            assert "get_profile" in asyncio.run(_session(server.http, token))
        with (
            httpx2.Client(timeout=30) as http,
            http.stream(
                "GET",
                f"{server.http}/mcp/",
                headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
            ) as stream,
        ):
            assert stream.status_code == 200
            server.proc.send_signal(signal.SIGTERM)
            try:
                server.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pytest.fail(f"uvicorn did not exit on SIGTERM:\n{server.log()[-3000:]}")
    finally:
        server.cleanup()
