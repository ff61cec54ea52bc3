"""Tests of the docs: every Python block of docs/agents.md runs, in order, on the real servers,
so that the agent frameworks' examples cannot rot."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from memory import selectors
from tests.instance import ROOT
from tests.test_docs_llm import python_blocks

AGENTS = ROOT / "docs" / "agents.md"


def test_the_agents_page_shows_the_agents_sdk_with_the_tools_and_langgraph():
    blocks = python_blocks(AGENTS)
    assert len(blocks) == 3
    assert "MemorySession(" in blocks[0] and "Runner.run_sync(" in blocks[0]
    assert "FunctionTool(" in blocks[1] and "toolset.acall(" in blocks[1]
    assert "MemorySession(" in blocks[1]
    assert "MemoryStore()" in blocks[2] and "StateGraph(" in blocks[2]
    assert all("assert " in block for block in blocks)


@pytest.mark.django_db(transaction=True)
def test_every_python_block_of_the_agents_page_runs():
    try:
        for number, block in enumerate(python_blocks(AGENTS), 1):
            # NOTE: dont_inherit: the block runs as a reader's file would, without this
            # module's ``from __future__ import annotations`` (dataclasses resolve theirs).
            code = compile(
                block, f"{AGENTS.name}, python block {number}", "exec", dont_inherit=True
            )
            exec(code, {"__name__": f"docs_agents_{number}"})
    finally:
        # NOTE: the session's sync code ran in asgiref's thread, on a connection of its own.
        asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())
    assert [t["session_id"] for t in selectors.context_get(owner_id="han")["turns"]] == [
        "laptop",
        "laptop",
        "phone",
        "phone",
    ]
    assert selectors.context_get(owner_id="han")["facts"] == {"name": "Han Meimei"}
    # The agent with the tools: the fact it remembered, and the turns of its run.
    chen = selectors.context_get(owner_id="chen")
    assert chen["facts"] == {"tea": "jasmine"}
    user, called, answered, replied = chen["turns"]
    assert (user["role"], user["content"]) == (
        "user",
        "I drink jasmine tea every morning, remember that.",
    )
    assert (called["role"], called["content"]) == (
        "assistant",
        'remember_fact({"key": "tea", "value": "jasmine"})',
    )
    assert answered["role"] == "tool"
    assert json.loads(answered["content"])["fact"]["value"] == "jasmine"
    assert (replied["role"], replied["content"]) == ("assistant", "Jasmine it is!")
    assert len(selectors.fact_list(owner_id="lei")) == 1
