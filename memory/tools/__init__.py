"""Memory as model tools: five tools that let a model work its own user's memory
(``search_memory``, ``get_profile``, ``remember_fact``, ``forget_fact``, ``recent_turns``),
each defined once (``definitions``), in the shapes of the chat APIs (``openai_tools``,
``anthropic_tools``), run through the same serializers, services, selectors, limits and
permissions as the REST API (``call``, ``acall``, ``resolve``, ``aresolve``, ``Toolset``).

The owner is bound by whoever runs a call (the ``owner_id`` of the Python API, the caller of
``POST users/{user_id}/tools/{name}/``, the token of an MCP session), never read from a tool's
arguments: no schema has an owner, and an argument a schema does not list is refused.

``definitions`` (the tools, their JSON Schemas), ``arguments`` (their DRF serializers),
``calls`` (running them); ``memory.views.tools`` holds the REST views and
``memory.integrations.mcp`` the MCP server, both doors over ``calls``.
"""

from __future__ import annotations

from memory.tools.calls import (
    ToolArgumentsInvalid,
    ToolMessage,
    ToolNotFound,
    Toolset,
    acall,
    aresolve,
    call,
    resolve,
)
from memory.tools.definitions import ToolDefinition, anthropic_tools, definitions, openai_tools

__all__ = [
    "ToolArgumentsInvalid",
    "ToolDefinition",
    "ToolMessage",
    "ToolNotFound",
    "Toolset",
    "acall",
    "anthropic_tools",
    "aresolve",
    "call",
    "definitions",
    "openai_tools",
    "resolve",
]
