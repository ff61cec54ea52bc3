"""Tests of the tools over MCP (memory.integrations.mcp), with the ``mcp`` SDK's own client:
over Streamable HTTP against the demo under uvicorn (``/mcp/``, DRF tokens as bearer tokens)
and over stdio against ``manage.py memory_mcp`` as a subprocess. The five tools with their
schemas, each called, a second session that sees what the first remembered, each token
reaching only its own memory, 401 without a token, bad arguments refused readably and storing
nothing, Host and Origin checks, and a fuzz of the arguments from the JSON Schemas."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import jsonschema
import pytest
from django.contrib.auth.models import Permission, User
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from rest_framework.authtoken.models import Token

from memory import selectors, services, tools
from memory.exceptions import MemoryUnavailable
from memory.integrations import mcp as memory_mcp
from tests.instance import environment, import_error_without
from tests.jsonschema_strategies import from_schema
from tests.servers import uvicorn_demo
from tests.test_tools import _breaks_value_rules, _invalid_arguments, stored

ROOT = Path(__file__).resolve().parent.parent
NAMES = [definition["name"] for definition in tools.definitions()]
real_db = pytest.mark.django_db(transaction=True)
FUZZ = settings(
    max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)

Session = Callable[[Client], Awaitable[Any]]


def _token(username: str, *, service: bool = False) -> str:
    user = User.objects.create_user(username)
    if service:
        user.user_permissions.add(Permission.objects.get(codename="access_all_memories"))
    return Token.objects.create(user=user).key


def over_http(url: str, token: str | None, session: Session, **options: Any) -> Any:
    """``session(client)`` in one MCP session over Streamable HTTP with these headers."""
    headers = dict(options.pop("headers", {}))
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"

    async def main() -> Any:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(f"{url}/mcp/", http_client=http), **options) as client,
        ):
            return await session(client)

    return asyncio.run(main())


def over_stdio(username: str, session: Session, *args: str) -> Any:
    """``session(client)`` in one MCP session with ``manage.py memory_mcp --user username``."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "memory_mcp", "--user", username, *args],
        env=environment(),
        cwd=ROOT,
    )

    async def main() -> Any:
        async with Client(server) as client:
            return await session(client)

    return asyncio.run(main())


def answer(result: Any) -> dict[str, Any]:
    """A tool result's JSON: its structured content, which its text says too."""
    assert json.loads(result.content[0].text) == result.structured_content
    assert result.is_error == ("error" in result.structured_content)
    return result.structured_content  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def demo(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    """The demo project under uvicorn, on the test database; its URL."""
    with django_db_blocker.unblock():
        env = {**environment(), "DJANGO_DEBUG": "0", "MEMORY_LOG_LEVEL": "WARNING"}
    with uvicorn_demo(env, name="mcp") as port:
        yield f"http://127.0.0.1:{port}"


async def _each_tool(client: Client) -> dict[str, Any]:
    results = {}
    for name, arguments in (
        ("remember_fact", {"key": "name", "value": "Alice"}),
        ("remember_fact", {"key": "pet", "value": {"kind": "cat"}}),
        ("forget_fact", {"key": "pet"}),
        ("get_profile", {}),
        ("recent_turns", {"limit": 2}),
        ("search_memory", {"query": "basketball"}),
    ):
        results[name] = answer(await client.call_tool(name, arguments))
    return results


def _check_each_tool(results: dict[str, Any]) -> None:
    assert results["forget_fact"] == {"deleted": True}
    assert results["get_profile"] == {"facts": {"name": "Alice"}}
    assert [t["content"] for t in results["recent_turns"]["turns"]] == ["Hi", "Basketball at 6?"]
    assert [t["content"] for t in results["search_memory"]["results"]] == ["Basketball at 6?"]


BAD = {
    "search_memory": {"query": ""},
    "get_profile": {"x": 1},
    "remember_fact": {"key": "..", "value": 1},
    "forget_fact": {},
    "recent_turns": {"limit": 51},
    "no_such_tool": {},
}


async def _refused(client: Client) -> dict[str, Any]:
    return {name: answer(await client.call_tool(name, args)) for name, args in BAD.items()}


def _check_refused(results: dict[str, Any]) -> None:
    assert list(results) == list(BAD)
    for name, result in results.items():
        assert list(result) == ["error"], (name, result)
        assert result["error"].startswith(("Invalid arguments for", "There is no tool")), result


def _alice_chat() -> None:
    for content in ("Hi", "Basketball at 6?"):
        services.turn_append(owner_id="alice", session_id="s", role="user", content=content)


async def _listed(client: Client) -> list[Any]:
    return list((await client.list_tools()).tools)


def _check_listed(listed: list[Any]) -> None:
    assert [tool.name for tool in listed] == NAMES
    for tool, definition in zip(listed, tools.definitions(), strict=True):
        assert tool.description == definition["description"]
        assert tool.input_schema == definition["parameters"]
    annotations = {tool.name: tool.annotations for tool in listed}
    assert annotations["get_profile"].read_only_hint is True
    assert annotations["forget_fact"].destructive_hint is True


# Streamable HTTP ---------------------------------------------------------------------------


@pytest.mark.slow
@real_db
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_http_lists_the_five_tools_with_their_schemas(demo, mode):
    _check_listed(over_http(demo, _token("alice"), _listed, mode=mode))


@pytest.mark.slow
@real_db
def test_http_calls_each_tool_and_a_reconnect_sees_what_was_remembered(demo):
    token = _token("alice")
    _alice_chat()
    _check_each_tool(over_http(demo, token, _each_tool))

    async def profile(client: Client) -> Any:
        return answer(await client.call_tool("get_profile", {}))

    # A second session, of a client on the 2025 protocol (the initialize handshake).
    assert over_http(demo, token, profile, mode="legacy") == {"facts": {"name": "Alice"}}
    assert selectors.fact_list(owner_id="alice")[0]["value"] == "Alice"


@pytest.mark.slow
@real_db
def test_http_a_token_reaches_only_its_own_memory(demo):
    alice, _ = _token("alice"), _token("bob")
    services.fact_put(owner_id="bob", key="name", value="Bob")
    services.turn_append(owner_id="bob", session_id="s", role="user", content="Basketball")
    before = stored("bob")

    async def everything(client: Client) -> dict[str, Any]:
        return {
            "profile": answer(await client.call_tool("get_profile", {})),
            "search": answer(await client.call_tool("search_memory", {"query": "basketball"})),
            "recent": answer(await client.call_tool("recent_turns", {})),
            "forget": answer(await client.call_tool("forget_fact", {"key": "name"})),
            "named": answer(await client.call_tool("get_profile", {"owner_id": "bob"})),
            "remember": answer(await client.call_tool("remember_fact", {"key": "k", "value": 1})),
        }

    seen = over_http(demo, alice, everything)
    assert seen["profile"] == {"facts": {}}
    assert seen["search"] == {"results": []} and seen["recent"] == {"turns": []}
    assert seen["forget"] == {"deleted": False}
    assert "owner is never an argument" in seen["named"]["error"]
    assert seen["remember"]["fact"]["key"] == "k"
    assert [f["key"] for f in selectors.fact_list(owner_id="alice")] == ["k"]
    assert stored("bob") == before
    # Naming bob in the header: refused before any MCP is spoken.
    response = httpx2.post(
        f"{demo}/mcp/",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={"Authorization": f"Bearer {alice}", "X-Memory-User": "bob"},
    )
    assert response.status_code == 403
    assert "service caller" in response.json()["detail"]


@pytest.mark.slow
@real_db
def test_http_a_service_caller_names_the_owner_in_a_header(demo):
    token = _token("svc", service=True)
    services.fact_put(owner_id="wang", key="name", value="Wang")

    async def profile(client: Client) -> Any:
        return answer(await client.call_tool("get_profile", {}))

    named = over_http(demo, token, profile, headers={"X-Memory-User": "wang"})
    assert named == {"facts": {"name": "Wang"}}
    # NOTE: without the header, a clear refusal; its own account's memory is not written.
    response = httpx2.post(
        f"{demo}/mcp/",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "remember_fact", "arguments": {"key": "city", "value": "上海"}},
        },
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert response.status_code == 400
    assert "X-Memory-User: <user id>" in response.json()["detail"]
    assert selectors.fact_list(owner_id="svc") == []


@pytest.mark.slow
@real_db
@pytest.mark.parametrize(
    "authorization", [None, "Bearer", "Bearer not-a-token", "Token {key}", "Basic {key}"]
)
def test_http_a_request_without_a_valid_bearer_token_is_401(demo, authorization):
    key = _token("alice")
    headers = {"Accept": "application/json, text/event-stream"}
    if authorization is not None:
        headers["Authorization"] = authorization.format(key=key)
    response = httpx2.post(
        f"{demo}/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers
    )
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["detail"]


@pytest.mark.slow
@real_db
def test_http_host_and_origin_are_checked(demo):
    headers = {
        "Authorization": f"Bearer {_token('alice')}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    url = f"{demo}/mcp/"
    assert (
        httpx2.post(url, json=ping, headers={**headers, "Host": "evil.example"}).status_code == 421
    )
    evil = {**headers, "Origin": "http://evil.example"}
    assert httpx2.post(url, json=ping, headers=evil).status_code == 403
    own = {**headers, "Origin": demo}
    response = httpx2.post(url, json=ping, headers=own)
    assert response.status_code == 200, response.text
    assert httpx2.post(url, json=ping, headers=headers).status_code == 200


@pytest.mark.slow
@real_db
def test_http_every_tool_refuses_bad_arguments_readably_storing_nothing(demo):
    token = _token("alice")
    _check_refused(over_http(demo, token, _refused))
    assert stored("alice") == (0, 0, 0, 0)


@pytest.mark.slow
@real_db
def test_http_a_number_that_would_not_read_back_is_refused_storing_nothing(demo):
    """``remember_fact`` with ``1e20``: jsonb would keep an integer past 64 bits, which made
    every later context read of the owner a 500."""
    token = _token("alice")

    async def one(client: Client) -> Any:
        return answer(await client.call_tool("remember_fact", {"key": "n", "value": 1e20}))

    result = over_http(demo, token, one)
    assert "Numbers must read back unchanged" in result["error"], result
    assert stored("alice") == (0, 0, 0, 0)


@pytest.mark.slow
@real_db
@pytest.mark.parametrize("definition", tools.definitions(), ids=lambda d: d["name"])
def test_http_fuzzed_arguments_are_answered_never_failed(demo, definition):
    token = _token("alice")
    schema = definition["parameters"]
    validator = jsonschema.Draft202012Validator(schema)

    @FUZZ
    @given(
        arguments=from_schema(schema)
        | _invalid_arguments(schema).filter(lambda a: isinstance(a, dict))
    )
    def check(arguments: dict[str, Any]) -> None:
        async def one(client: Client) -> Any:
            return answer(await client.call_tool(definition["name"], arguments))

        result = over_http(demo, token, one)
        refused = not validator.is_valid(arguments) or (
            definition["name"] == "remember_fact" and _breaks_value_rules(arguments["value"])
        )
        assert ("error" in result) == refused, (arguments, result)
        if definition["name"] == "remember_fact" and not refused:
            services.memory_forget(owner_id="alice")
        assert stored("alice")[2] == 0

    check()


# stdio -------------------------------------------------------------------------------------


@pytest.mark.slow
@real_db
def test_stdio_lists_and_calls_each_tool_and_a_restart_sees_what_was_remembered():
    User.objects.create_user("alice")
    _alice_chat()
    _check_listed(over_stdio("alice", _listed))
    _check_each_tool(over_stdio("alice", _each_tool))

    async def profile_and_mistakes(client: Client) -> list[Any]:
        return [
            answer(await client.call_tool("get_profile", {})),
            answer(await client.call_tool("remember_fact", {"key": "..", "value": 1})),
            answer(await client.call_tool("get_profile", {"user_id": "bob"})),
        ]

    profile, dots, named = over_stdio("alice", profile_and_mistakes)
    assert profile == {"facts": {"name": "Alice"}}
    assert "only of dots" in dots["error"] and "owner is never" in named["error"]
    before = stored("alice")
    _check_refused(over_stdio("alice", _refused))
    assert stored("alice") == before
    assert [f["key"] for f in selectors.fact_list(owner_id="alice")] == ["name"]


@pytest.mark.slow
@real_db
def test_stdio_a_service_user_may_serve_another_owner_and_no_one_else():
    User.objects.create_user("alice")
    _token("svc", service=True)
    services.fact_put(owner_id="wang", key="name", value="Wang")

    async def profile(client: Client) -> Any:
        return answer(await client.call_tool("get_profile", {}))

    assert over_stdio("svc", profile, "--owner", "wang") == {"facts": {"name": "Wang"}}
    for args in (["--user", "alice", "--owner", "wang"], ["--user", "nobody"]):
        finished = subprocess.run(
            [sys.executable, "manage.py", "memory_mcp", *args],
            cwd=ROOT,
            env=environment(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert finished.returncode != 0
        assert finished.stdout == ""
        assert "may not reach" in finished.stderr or "No active user" in finished.stderr


# In process --------------------------------------------------------------------------------


def over_asgi(token: str, session: Session) -> Any:
    """``session(client)`` in one MCP session with ``mcp_app()`` in this process, through
    httpx's ASGI transport (which sends no lifespan)."""
    app = memory_mcp.mcp_app()

    async def main() -> Any:
        async with (
            httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=app),
                base_url="http://127.0.0.1",
                headers={"Authorization": f"Bearer {token}"},
            ) as http,
            Client(streamable_http_client("http://127.0.0.1/mcp/", http_client=http)) as client,
        ):
            return await session(client)

    with override_settings(ALLOWED_HOSTS=["127.0.0.1"]):
        return asyncio.run(main())


@real_db
def test_the_asgi_app_starts_itself_where_no_lifespan_came():
    """Served by something that sends no lifespan, the endpoint starts the SDK's session
    manager from its first request."""

    async def remember(client: Client) -> Any:
        return answer(await client.call_tool("remember_fact", {"key": "a", "value": 1}))

    assert over_asgi(_token("alice"), remember)["fact"]["key"] == "a"
    assert selectors.fact_list(owner_id="alice")[0]["value"] == 1


@real_db
def test_a_lost_database_is_an_mcp_error_not_a_result(monkeypatch):
    # NOTE: the mapping alone, with the service's error patched in; the outage itself is the
    # services' tests' (memory.tools raises MemoryUnavailable as they do: tests/test_tools.py).
    def lost(*args: Any, **kwargs: Any) -> Any:
        raise MemoryUnavailable("The database is unavailable: connection refused")

    token = _token("alice")
    monkeypatch.setattr(memory_mcp, "tool_run", lost)

    async def profile(client: Client) -> Any:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("get_profile", {})
        return raised.value.error.message

    assert over_asgi(token, profile) == "The memory database is unavailable; try again later."


def _scope(host: str | None, origin: str | None = None) -> dict[str, Any]:
    headers = [(b"host", host.encode())] if host is not None else []
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    return {"type": "http", "headers": headers}


@pytest.mark.parametrize(
    ("allowed", "trusted", "host", "origin", "status"),
    [
        (["127.0.0.1"], [], "127.0.0.1:8000", None, None),
        (["127.0.0.1"], [], "evil.example", None, 421),
        (["127.0.0.1"], [], None, None, 421),
        ([".example.com"], [], "mcp.example.com", None, None),
        (["*"], [], "anything.example", None, None),
        (["127.0.0.1"], [], "127.0.0.1:8000", "http://127.0.0.1:8000", None),
        (["127.0.0.1"], [], "127.0.0.1:8000", "http://127.0.0.1:9000", 403),
        (["*"], [], "127.0.0.1:8000", "http://evil.example", 403),
        (["*"], [], "127.0.0.1:8000", "null", 403),
        (["a.com"], ["https://app.b.com"], "a.com", "https://app.b.com", None),
        (["a.com"], ["https://*.b.com"], "a.com", "https://x.b.com", None),
        (["a.com"], ["https://*.b.com"], "a.com", "http://x.b.com", 403),
    ],
)
def test_host_and_origin_follow_djangos_settings(allowed, trusted, host, origin, status):
    with override_settings(ALLOWED_HOSTS=allowed, CSRF_TRUSTED_ORIGINS=trusted):
        refusal = memory_mcp.transport_refusal(_scope(host, origin))
    assert (refusal.status if refusal else None) == status


def test_the_debug_default_hosts_are_djangos():
    with override_settings(ALLOWED_HOSTS=[], DEBUG=True):
        assert memory_mcp.transport_refusal(_scope("localhost:8000")) is None
    with override_settings(ALLOWED_HOSTS=[], DEBUG=False):
        assert memory_mcp.transport_refusal(_scope("localhost:8000")).status == 421


@pytest.mark.django_db
def test_the_owner_is_the_tokens_never_a_strangers(owner_user, service_user):
    owner = Token.objects.create(user=owner_user).key
    service = Token.objects.create(user=service_user).key
    resolve = memory_mcp._caller_resolve
    auth = memory_mcp.TokenAuthentication
    mine = ("wang", f"user:{owner_user.pk}", "api:wang")
    assert resolve(f"Bearer {owner}", None, auth) == mine
    assert resolve(f"bearer  {owner} ", "wang", auth) == mine
    assert resolve(f"Bearer {owner}", "li", auth).status == 403
    assert resolve(f"Bearer {service}", "li", auth) == ("li", "owner:li", "api:svc")
    assert resolve(f"Bearer {service}", "not valid!", auth).status == 400
    # NOTE: a service caller names the owner, its own account's too; never silently its own.
    refused = resolve(f"Bearer {service}", None, auth)
    assert refused.status == 400
    assert "name the one this request is for in the header X-Memory-User" in refused.detail
    assert resolve(f"Bearer {service}", "svc", auth) == (
        "svc",
        "user:" + str(service_user.pk),
        "api:svc",
    )
    assert resolve("Bearer nope", None, auth).status == 401
    owner_user.is_active = False
    owner_user.save()
    assert resolve(f"Bearer {owner}", None, auth).status == 401


def test_an_unbound_server_refuses_a_call_with_no_authenticated_owner():
    with pytest.raises(MCPError, match="not authenticated"):
        memory_mcp.MemoryMCPServer()._bound(None)
    bound = memory_mcp.MemoryMCPServer(owner_id="wang", caller="x", actor="api:wang")
    assert bound._bound(None) == ("wang", "x", "api:wang")


@pytest.mark.django_db(transaction=True)
def test_a_bound_servers_fact_writes_name_its_actor():
    from tests.loop import run

    server = memory_mcp.MemoryMCPServer(owner_id="wang", caller="x", actor="api:wang")
    result = run(lambda: server.call_tool("remember_fact", {"key": "city", "value": "上海"}))
    assert not result.is_error
    (version,) = selectors.fact_history(owner_id="wang", key="city").results
    assert version["actor"] == "api:wang"


def test_without_the_mcp_sdk_the_import_error_names_the_extra():
    out = import_error_without("mcp", "memory.integrations.mcp")
    assert out.startswith("memory.integrations.mcp needs the MCP SDK, the extra mcp")
    assert 'pip install "$(echo dist/django_memory-*.whl)[mcp]" after make dist' in out


def test_the_command_without_the_mcp_sdk_names_the_extra_to_install():
    """Without the extra neither the SDK nor its anyio is there: the command says what to
    install, not which of its modules is missing."""
    code = (
        "import sys; sys.modules['mcp'] = None; sys.modules['anyio'] = None\n"
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(['manage.py', 'memory_mcp', '--user', 'nobody'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parent.parent,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith(
        "CommandError: manage.py memory_mcp needs the MCP SDK, the extra mcp"
    )
    assert 'pip install "$(echo dist/django_memory-*.whl)[mcp]" after make dist' in done.stderr
    assert "anyio" not in done.stderr
