"""The five tools, each defined once: its name, a description a model can act on, the JSON
Schema of its arguments, the serializer that checks them (``memory.tools.arguments``) and the
service or selector it runs; and the shapes the chat APIs take them in.

Every schema is JSON Schema 2020-12 (what MCP assumes), ``"type": "object"`` with
``additionalProperties: false``: the owner is never an argument, so no schema can name one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from memory import limits, selectors, services
from memory.conf import conf
from memory.exceptions import FactNotFound
from memory.payloads import fact_payload
from memory.search import MAX_QUERY_CHARS
from memory.tools.arguments import (
    MAX_RECENT_TURNS,
    MAX_SEARCH_RESULTS,
    ForgetFactArguments,
    GetProfileArguments,
    RecentTurnsArguments,
    RememberFactArguments,
    SearchMemoryArguments,
    ToolArguments,
)
from memory.validators import DATE_OR_DATE_TIME_PATTERN, FACT_KEY_RE


class ToolDefinition(TypedDict):
    """A tool as the contract gives it: ``{"name", "description", "parameters"}``."""

    name: str
    description: str
    parameters: dict[str, Any]


# ``run(owner_id, arguments, actor)``: ``actor`` is what a fact version it writes records.
Run = Callable[[str, Mapping[str, Any], str], dict[str, Any]]


@dataclass(frozen=True)
class Tool:
    """One tool: ``run(owner_id, arguments, actor)`` takes the arguments its serializer
    validated."""

    name: str
    description: str
    schema: Callable[[], dict[str, Any]]
    arguments: type[ToolArguments]
    run: Run
    # Whether a call only reads (MCP's readOnlyHint), and whether one may be a heavy read
    # (``memory.limits``: it holds a slot of its caller's while it runs).
    read_only: bool
    heavy: Callable[[Mapping[str, Any]], bool]

    def definition(self) -> ToolDefinition:
        return {"name": self.name, "description": self.description, "parameters": self.schema()}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _fact_key(description: str) -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": 64,
        "pattern": FACT_KEY_RE.pattern,
        "description": description,
    }


def _limit(maximum: int, default: int, description: str) -> dict[str, Any]:
    return {
        "type": "integer",
        "minimum": 1,
        "maximum": maximum,
        "default": default,
        "description": description,
    }


def _json_rules() -> str:
    # NOTE: re-read on each call, as conf promises: the size limit is a setting.
    return (
        "Any JSON value: a string, number, boolean, null, list or object. No string in it may "
        f"hold a NUL character, it is at most 32 levels deep and {conf.MAX_JSON_BYTES} bytes "
        "of JSON; integers fit in signed 64 bits, and a float of 1e16 or more in magnitude is "
        "taken only when it is exactly an integer within them (send such numbers as integers)."
    )


# Schemas -----------------------------------------------------------------------------------


# An ISO-8601 date, or a date-time with its offset, as the tools take it: the API's own pattern,
# calendar days only, so that whatever it matches the server parses.
ISO_DATE_PATTERN = DATE_OR_DATE_TIME_PATTERN


def _search_memory_schema() -> dict[str, Any]:
    return _object(
        {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_QUERY_CHARS,
                # NOTE: at least one character that is not white space; and no NUL, which no
                # turn can hold (the API's schema publishes "no NUL" the same way).
                "pattern": "\\S",
                "not": {"pattern": "\\u0000"},
                "description": "Words to look for, as the user would have said them: free text "
                "in English (any form or case of a word) or Chinese (no spaces needed), never "
                "query syntax.",
            },
            "limit": _limit(MAX_SEARCH_RESULTS, 5, "Most turns to return."),
            "after": {
                "type": "string",
                "pattern": ISO_DATE_PATTERN,
                "description": "Only turns said at or after this ISO-8601 date or date-time "
                "(2026-05-01).",
            },
            "before": {
                "type": "string",
                "pattern": ISO_DATE_PATTERN,
                "description": "Only turns said before this ISO-8601 date or date-time.",
            },
            "min_score": {
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "description": "Only turns at least this relevant (each result's score, 0-1); "
                "0.5 drops what is likely unrelated, so that no result means it was never said.",
            },
        },
        ["query"],
    )


def _get_profile_schema() -> dict[str, Any]:
    return _object({}, [])


def _remember_fact_schema() -> dict[str, Any]:
    return _object(
        {
            "key": _fact_key(
                "What the fact is about: 1-64 lower-case letters, digits and _ - ., not only "
                "dots, such as name, preferred_name, likes, dislikes, location, occupation, "
                "language."
            ),
            "value": {"description": _json_rules()},
        },
        ["key", "value"],
    )


def _forget_fact_schema() -> dict[str, Any]:
    key = _fact_key("The key of the fact to forget, as get_profile shows it.")
    return _object({"key": key}, ["key"])


def _recent_turns_schema() -> dict[str, Any]:
    return _object(
        {"limit": _limit(MAX_RECENT_TURNS, 10, "How many of the newest turns to return.")},
        [],
    )


# Runs --------------------------------------------------------------------------------------


def _search_memory(owner_id: str, arguments: Mapping[str, Any], actor: str) -> dict[str, Any]:
    turns = selectors.turn_search(
        owner_id=owner_id,
        q=arguments["query"],
        limit=arguments["limit"],
        after=arguments.get("after"),
        before=arguments.get("before"),
        min_score=arguments.get("min_score"),
    )
    return {"results": turns}


def _get_profile(owner_id: str, arguments: Mapping[str, Any], actor: str) -> dict[str, Any]:
    facts = selectors.fact_list(owner_id=owner_id)
    return {"facts": {fact["key"]: fact["value"] for fact in facts}}


def _remember_fact(owner_id: str, arguments: Mapping[str, Any], actor: str) -> dict[str, Any]:
    fact, _ = services.fact_put(
        owner_id=owner_id, key=arguments["key"], value=arguments["value"], actor=actor
    )
    return {"fact": fact_payload(fact)}


def _forget_fact(owner_id: str, arguments: Mapping[str, Any], actor: str) -> dict[str, Any]:
    try:
        services.fact_delete(owner_id=owner_id, key=arguments["key"], actor=actor)
    except FactNotFound:
        return {"deleted": False}
    return {"deleted": True}


def _recent_turns(owner_id: str, arguments: Mapping[str, Any], actor: str) -> dict[str, Any]:
    context = selectors.context_get(owner_id=owner_id, turns=arguments["limit"])
    return {"turns": context["turns"]}


def _never(arguments: Mapping[str, Any]) -> bool:
    return False


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            name="search_memory",
            description=(
                "Search everything this user said before, and what you answered, in every "
                "earlier conversation (all their sessions and devices): the turns that match "
                "the query, best match first. Use it when the user mentions something from an "
                "earlier conversation that is not in the messages you have, such as 'the book "
                'I told you about\'. Returns {"results": [turn, ...]}; each turn has seq, '
                "session_id, role (user or assistant), content, metadata and created_at."
            ),
            schema=_search_memory_schema,
            arguments=SearchMemoryArguments,
            run=_search_memory,
            read_only=True,
            heavy=lambda arguments: True,
        ),
        Tool(
            name="get_profile",
            description=(
                "Read every fact remembered about this user (their name, preferred name, likes, "
                "dislikes, location, occupation, language, and anything remembered with "
                'remember_fact), as {"facts": {key: value, ...}}; empty when nothing is known '
                "yet. Call it before answering anything about the user, rather than guessing."
            ),
            schema=_get_profile_schema,
            arguments=GetProfileArguments,
            run=_get_profile,
            read_only=True,
            heavy=_never,
        ),
        Tool(
            name="remember_fact",
            description=(
                "Remember one fact about this user for every later conversation, replacing what "
                'was remembered under the same key: for example {"key": "preferred_name", '
                '"value": "Jim"} or {"key": "likes", "value": ["basketball", '
                '"jazz"]} (read the old value with get_profile first to add to a list). Store '
                'only what the user said about themselves. Returns {"fact": {key, value, '
                "session_id, updated_at, version}}; an error if the key is not allowed or the "
                "user already holds as many facts as allowed (forget one first)."
            ),
            schema=_remember_fact_schema,
            arguments=RememberFactArguments,
            run=_remember_fact,
            read_only=False,
            heavy=_never,
        ),
        Tool(
            name="forget_fact",
            description=(
                "Forget one fact about this user, by its key, when they ask you to or it is no "
                'longer true. Returns {"deleted": true}, or {"deleted": false} when nothing '
                "was remembered under that key."
            ),
            schema=_forget_fact_schema,
            arguments=ForgetFactArguments,
            run=_forget_fact,
            read_only=False,
            heavy=_never,
        ),
        Tool(
            name="recent_turns",
            description=(
                "Read the newest turns of this user's conversation history, from all their "
                'sessions and devices, oldest first: {"turns": [turn, ...]}, each with seq, '
                "session_id, role, content, metadata and created_at. Use it to pick up where "
                "the user left off in another tab or on another device."
            ),
            schema=_recent_turns_schema,
            arguments=RecentTurnsArguments,
            run=_recent_turns,
            read_only=True,
            heavy=lambda arguments: limits.context_heavy(turns=arguments["limit"]),
        ),
    )
}


def definitions() -> list[ToolDefinition]:
    """The five tools as the contract defines them: ``{"name", "description", "parameters"}``,
    ``parameters`` their arguments' JSON Schema. A new list each call, free to change."""
    return [tool.definition() for tool in TOOLS.values()]


def openai_tools() -> list[dict[str, Any]]:
    """The tools as OpenAI's Chat Completions API takes them (``tools=``): ``{"type":
    "function", "function": {"name", "description", "parameters"}}`` each."""
    return [{"type": "function", "function": dict(definition)} for definition in definitions()]


def anthropic_tools() -> list[dict[str, Any]]:
    """The tools as Anthropic's Messages API takes them (``tools=``): ``{"name",
    "description", "input_schema"}`` each."""
    return [
        {
            "name": definition["name"],
            "description": definition["description"],
            "input_schema": definition["parameters"],
        }
        for definition in definitions()
    ]
