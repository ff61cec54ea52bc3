"""The memory's tools over MCP, the Model Context Protocol, on its official SDK (``mcp`` 2.x):
the same five tools as ``memory.tools``, on the same path (``tool_run``). Needs the extra
``mcp``: ``pip install "$(echo dist/django_memory-*.whl)[mcp]"`` after ``make dist``.

- ``MemoryMCPServer``: an ``MCPServer`` with the tools, bound to one owner (stdio, ``manage.py
  memory_mcp``) or, unbound, to each HTTP request's authenticated owner.
- ``mcp_app()``: the Streamable HTTP endpoint as an ASGI application: Host and Origin checked
  against Django's settings, a DRF token as bearer (401 without), the caller's own owner or, for
  a service caller, the one ``X-Memory-User`` names (400 without; 403 for anyone else).
- ``mcp_mount(application)``: a Django ASGI application with ``mcp_app()`` at ``/mcp/``.

Requests are stateless and answered with JSON; database work runs in a thread of the request's
own, whose connection is closed at its end.
"""

from __future__ import annotations

from memory.extras import extra_needed

with extra_needed("memory.integrations.mcp", "the MCP SDK", "mcp"):
    import mcp.types as mcp_types
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from mcp.shared.exceptions import MCPError

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import InterfaceError, OperationalError, close_old_connections, connections
from django.http.request import split_domain_port, validate_host
from rest_framework.exceptions import AuthenticationFailed

import memory
from memory import codec
from memory.authentication import TokenAuthentication
from memory.exceptions import MemoryUnavailable
from memory.permissions import can_reach, is_service_caller, owner_id_for
from memory.tools.calls import MISTAKES, tool_run
from memory.tools.definitions import TOOLS
from memory.validators import actor_of, validate_owner_id

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Where an authenticated request carries its owner and caller to the tool calls it holds.
OWNER_KEY = "memory.owner_id"
CALLER_KEY = "memory.caller"
# ... and the actor its fact versions record (``api:<username>``, as the REST API's).
ACTOR_KEY = "memory.actor"
OWNER_HEADER = "x-memory-user"
SERVICE_NAMES_NO_USER = (
    "This token is a service caller's (memory.access_all_memories), which reaches every "
    "user's memory: name the one this request is for in the header X-Memory-User: <user id> "
    "(its own account's too). Nothing was read or written."
)
# NOTE: a fixed text: the driver's message would tell the caller the database's address.
UNAVAILABLE = "The memory database is unavailable; try again later."
INSTRUCTIONS = (
    "Tools over the long-term memory of the user you are talking with, kept across all their "
    "conversations, sessions and devices: read what is known about them (get_profile), "
    "remember or forget a fact (remember_fact, forget_fact), search or read back what was said "
    "before (search_memory, recent_turns)."
)


def _call_in_request(
    name: str, arguments: Any, owner_id: str, caller: str | None, actor: str
) -> dict[str, Any]:
    """One tool call, as Django runs a request: the connection closed before and after it."""
    close_old_connections()
    try:
        return tool_run(
            name=name, arguments=arguments, owner_id=owner_id, caller=caller, actor=actor
        )
    except MISTAKES as e:
        return {"error": str(e)}
    finally:
        close_old_connections()


_call_hop = sync_to_async(_call_in_request, thread_sensitive=True)


class MemoryMCPServer(MCPServer):
    """The SDK's ``MCPServer`` serving the five tools of ``memory.tools``, with their own JSON
    Schemas and structured results. A model's mistake is a result with ``isError`` that stores
    nothing; a lost database is an MCP error. ``owner_id`` binds every call to that owner; without
    it, a call without an authenticated request is refused. ``caller`` and ``actor`` as for the REST
    API."""

    def __init__(
        self, *, owner_id: str | None = None, caller: str | None = None, actor: str = "python"
    ) -> None:
        if owner_id is not None:
            validate_owner_id(owner_id)
        # NOTE: MCPServer() calls logging.basicConfig(), which must not configure the host's root
        # logger.
        root, guard = logging.getLogger(), logging.NullHandler()
        root.addHandler(guard)
        try:
            super().__init__("memory", instructions=INSTRUCTIONS, version=memory.__version__)
        finally:
            root.removeHandler(guard)
        self.owner_id = owner_id
        self.caller = caller
        self.actor = actor

    async def list_tools(self) -> list[mcp_types.Tool]:
        return [
            mcp_types.Tool(
                name=tool.name,
                description=tool.description,
                input_schema=tool.schema(),
                annotations=mcp_types.ToolAnnotations(
                    read_only_hint=tool.read_only,
                    destructive_hint=tool.name == "forget_fact",
                    idempotent_hint=True,
                    open_world_hint=False,
                ),
            )
            for tool in TOOLS.values()
        ]

    def _bound(self, context: Context[Any, Any] | None) -> tuple[str, str | None, str]:
        """The owner, caller and actor of a call: the server's, else its HTTP request's."""
        if self.owner_id is not None:
            return self.owner_id, self.caller, self.actor
        request = None
        if context is not None:
            with contextlib.suppress(ValueError):
                request = context.request_context.request
        scope = getattr(request, "scope", None) or {}
        owner_id = scope.get(OWNER_KEY)
        if not isinstance(owner_id, str):
            raise MCPError(
                code=mcp_types.INVALID_REQUEST, message="This call was not authenticated."
            )
        return owner_id, scope.get(CALLER_KEY), scope.get(ACTOR_KEY) or "python"

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        context: Context[Any, Any] | None = None,
    ) -> mcp_types.CallToolResult:
        owner_id, caller, actor = self._bound(context)
        try:
            result = await _call_hop(name, arguments, owner_id, caller, actor)
        except MemoryUnavailable as e:
            raise MCPError(code=mcp_types.INTERNAL_ERROR, message=UNAVAILABLE) from e
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=codec.dumps(result).decode())],
            structured_content=result,
            is_error="error" in result,
        )


# The HTTP side ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """An HTTP answer instead of the MCP endpoint's: a status and what it says."""

    status: int
    detail: str

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", b"application/json")]
        if self.status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="memory"'))
        return headers


def _header(scope: Scope, name: bytes) -> str | None:
    """The first value of a request header (lower-case ``name``), as text."""
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _allowed_hosts() -> list[str]:
    """``ALLOWED_HOSTS``, read per request, with Django's defaults under DEBUG."""
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def _origin_trusted(origin: str) -> bool:
    """Whether ``origin`` is one of ``CSRF_TRUSTED_ORIGINS`` (``https://*.example.com`` a
    subdomain pattern, as Django's CSRF check reads it)."""
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        if origin == trusted:
            return True
        scheme, _, pattern = trusted.partition("://")
        rest = origin.removeprefix(f"{scheme}://")
        if pattern.startswith("*.") and rest != origin and rest.endswith(pattern[1:]):
            return True
    return False


def transport_refusal(scope: Scope) -> Refusal | None:
    """DNS-rebinding protection as the SDK's (421 for a Host, 403 for an Origin), from Django's
    lists read per request: the Host must pass ``ALLOWED_HOSTS``, an Origin must be the Host's own
    or in ``CSRF_TRUSTED_ORIGINS``."""
    host = _header(scope, b"host")
    domain, _ = split_domain_port(host or "")
    if not host or not domain or not validate_host(domain, _allowed_hosts()):
        return Refusal(421, "Invalid Host header")
    origin = _header(scope, b"origin")
    if origin is None:
        return None
    parts = urlsplit(origin)
    same = parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()
    if not same and not _origin_trusted(origin):
        return Refusal(403, "Invalid Origin header")
    return None


def _caller_resolve(
    authorization: str | None, named: str | None, authentication: type[TokenAuthentication]
) -> tuple[str, str, str] | Refusal:
    """The owner, caller and actor of a request with these headers, or why it is refused."""
    scheme, _, key = (authorization or "").strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        return Refusal(
            401, "Authentication credentials were not provided: send Authorization: Bearer <token>."
        )
    authenticator = authentication()
    # NOTE: the owner check follows (can_reach); the token's statement may answer it too.
    authenticator.reach_checked = True
    try:
        user, _ = authenticator.authenticate_credentials(key)
    except AuthenticationFailed as e:
        return Refusal(401, str(e.detail))
    own = owner_id_for(user)
    if named is None:
        # NOTE: a service caller must name the owner: its own account's memory is not a default.
        if is_service_caller(user):
            return Refusal(400, SERVICE_NAMES_NO_USER)
        if own is None:
            return Refusal(403, "This account reaches no user's memory.")
        owner_id = own
    else:
        try:
            validate_owner_id(named)
        except ValidationError as e:
            return Refusal(400, f"X-Memory-User: {' '.join(e.messages)}")
        if not can_reach(user, named):
            return Refusal(
                403,
                "Only a service caller (memory.access_all_memories) may name another user's "
                "memory in X-Memory-User.",
            )
        owner_id = named
    try:
        validate_owner_id(owner_id)
    except ValidationError:
        return Refusal(403, "This account's user id is not one a memory may have.")
    caller = f"user:{user.pk}" if owner_id == own else f"owner:{owner_id}"
    return owner_id, caller, actor_of("api", user.get_username())


def _caller_in_request(
    authorization: str | None, named: str | None, authentication: type[TokenAuthentication]
) -> tuple[str, str, str] | Refusal:
    close_old_connections()
    try:
        return _caller_resolve(authorization, named, authentication)
    except (MemoryUnavailable, OperationalError, InterfaceError):
        return Refusal(503, UNAVAILABLE)
    finally:
        close_old_connections()


_caller_hop = sync_to_async(_caller_in_request, thread_sensitive=True)
_close_hop = sync_to_async(connections.close_all, thread_sensitive=True)


class MCPApp:
    """The ASGI application of the Streamable HTTP endpoint (``mcp_app``): see the module."""

    def __init__(
        self,
        server: MemoryMCPServer,
        *,
        transport_security: TransportSecuritySettings | None,
        authentication: type[TokenAuthentication],
    ) -> None:
        self.server = server
        self.authentication = authentication
        # NOTE: with no settings given, this app checks Host and Origin from Django's settings.
        self.check_transport = transport_security is None
        self.server.streamable_http_app(
            streamable_http_path="/",
            stateless_http=True,
            json_response=True,
            transport_security=transport_security
            or TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.session_manager: StreamableHTTPSessionManager = self.server.session_manager
        self._stack: contextlib.AsyncExitStack | None = None
        self._started: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1000})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    self._stack = contextlib.AsyncExitStack()
                    await self._stack.enter_async_context(self.session_manager.run())
                except Exception as e:
                    await send({"type": "lifespan.startup.failed", "message": str(e)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._stack is not None:
                    await self._stack.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _ensure_running(self) -> None:
        """Start the session manager from a request, where no lifespan started it."""
        if self._stack is not None:
            return
        if self._started is None:
            self._started = asyncio.Event()

            async def run() -> None:
                assert self._started is not None
                try:
                    async with self.session_manager.run():
                        self._started.set()
                        await asyncio.Event().wait()
                finally:
                    # A manager that failed to start lets its waiters on, to fail there.
                    self._started.set()

            # NOTE: a task of its own, so that it outlives the request that started it.
            self._runner = asyncio.get_running_loop().create_task(run())
        await self._started.wait()

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = transport_refusal(scope) if self.check_transport else None
        if refusal is not None:
            await self._refuse(send, refusal, text=True)
            return
        # NOTE: a thread of this request's own for its sync code, as Django's handler does; its
        # connection is closed when the request ends.
        async with ThreadSensitiveContext():
            try:
                found = await _caller_hop(
                    _header(scope, b"authorization"),
                    _header(scope, b"x-memory-user"),
                    self.authentication,
                )
                if isinstance(found, Refusal):
                    await self._refuse(send, found)
                    return
                owner_id, caller, actor = found
                await self._ensure_running()
                await self.session_manager.handle_request(
                    {**scope, OWNER_KEY: owner_id, CALLER_KEY: caller, ACTOR_KEY: actor},
                    receive,
                    send,
                )
            finally:
                await _close_hop()

    @staticmethod
    async def _refuse(send: Send, refusal: Refusal, *, text: bool = False) -> None:
        if text:
            body = refusal.detail.encode()
            headers = [(b"content-type", b"text/plain; charset=utf-8")]
        else:
            body = codec.dumps({"detail": refusal.detail})
            headers = refusal.headers()
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def mcp_app(
    *,
    transport_security: TransportSecuritySettings | None = None,
    authentication: type[TokenAuthentication] = TokenAuthentication,
) -> MCPApp:
    """The Streamable HTTP endpoint of the memory's tools, an ASGI application (``mcp_mount`` mounts
    it at ``/mcp/``). ``transport_security`` hands the Host and Origin checks to the SDK;
    ``authentication`` is the DRF token authentication for bearer tokens. Each call makes a new app
    with its own session manager."""
    return MCPApp(
        MemoryMCPServer(), transport_security=transport_security, authentication=authentication
    )


class MCPMount:
    """``application`` with ``mcp`` at ``path`` (and at ``path`` without its last slash)."""

    def __init__(self, application: ASGIApp, mcp: ASGIApp, *, path: str) -> None:
        self.application = application
        self.mcp = mcp
        self.paths = {path, path.rstrip("/") or "/"}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            # NOTE: Django's ASGI handler has no lifespan: this one is the MCP endpoint's.
            await self.mcp(scope, receive, send)
            return
        path = str(scope.get("path", "")).removeprefix(str(scope.get("root_path", "")))
        if scope["type"] == "http" and path in self.paths:
            await self.mcp(scope, receive, send)
            return
        await self.application(scope, receive, send)


def mcp_mount(application: ASGIApp, *, path: str = "/mcp/", mcp: ASGIApp | None = None) -> MCPMount:
    """``application`` (a Django ASGI application) with the MCP endpoint (``mcp_app()``, or
    ``mcp``) answering at ``path``, and the lifespan of the ASGI server passed to it."""
    return MCPMount(application, mcp or mcp_app(), path=path)
