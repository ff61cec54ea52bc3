"""Tests of docs/agents.md: every Python block runs both ways the page says, pasted into a plain
``manage.py shell`` and then saved as ``example.py``, with the demo's settings
(``.tmp/demo.env``), in a fresh copy of the project, on the real servers, so that the agent
frameworks' examples cannot rot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory import selectors
from tests import instance, newcomer
from tests.instance import ROOT

AGENTS = ROOT / "docs" / "agents.md"


def test_the_agents_page_shows_the_agents_sdk_with_the_tools_and_langgraph():
    blocks = newcomer.python_blocks(AGENTS)
    assert len(blocks) == 4
    assert "MemorySession(" in blocks[0] and "Runner.run_sync(" in blocks[0]
    assert "FunctionTool(" in blocks[1] and "toolset.acall(" in blocks[1]
    assert "MemorySession(" in blocks[1]
    assert "MemoryStore()" in blocks[2] and "StateGraph(" in blocks[2]
    assert "MemoryCheckpointSaver(owner_id=" in blocks[3] and "StateGraph(" in blocks[3]
    assert all("assert " in block for block in blocks)
    assert all("services.memory_forget(owner_id=" in block for block in blocks)


@pytest.mark.django_db(transaction=True)
def test_every_python_block_of_the_agents_page_runs_as_it_says_and_again(tmp_path: Path) -> None:
    tree = newcomer.clone(tmp_path / "memory")
    env = instance.demo_terminal(tree)
    # NOTE: twice, pasted into the shell and then saved and run, as the page offers: each
    # example starts by forgetting its user, so a reader may run it again.
    for pasted in (True, False):
        newcomer.run_page_blocks(tree, AGENTS, env, pasted=pasted)
    assert [t["session_id"] for t in selectors.context_get(owner_id="liu")["turns"]] == [
        "laptop",
        "laptop",
        "phone",
        "phone",
    ]
    assert selectors.context_get(owner_id="liu")["facts"] == {"name": "Liu Yang"}
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
    # The graph on the checkpointer: its thread's messages, the user's turns once each.
    zhao = selectors.context_get(owner_id="zhao")["turns"]
    assert [(t["session_id"], t["role"]) for t in zhao] == [
        ("laptop", "user"),
        ("laptop", "assistant"),
    ] * 2
