"""Tests of docs/tools.md: every plain Python block runs both ways the page says, pasted into
``manage.py shell`` and saved as ``example.py``, with the demo's settings (``.tmp/demo.env``), in
a fresh copy of the project, on the real servers; with scripted stand-ins for the ``openai``,
``anthropic`` and ``langchain_openai`` packages (tests/model_apis.py: no network, no key), so
that the page's tool loops are the ones a chat backend runs, and print what the page says they
print."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memory import selectors, tools
from tests import instance, model_apis, newcomer
from tests.instance import ROOT

PAGE = ROOT / "docs" / "tools.md"
PRINTED = re.compile(r"^print\(.*\)  # (.*)$", re.MULTILINE)


def test_the_tools_page_shows_the_three_loops_and_a_mistake():
    blocks = newcomer.python_blocks(PAGE)
    assert len(blocks) == 4
    assert "toolset.resolve(call)" in blocks[0] and "openai_tools()" in blocks[0]
    assert "anthropic_tools()" in blocks[1] and "tool_result" in blocks[1]
    assert "memory_tools(owner_id=" in blocks[2] and ".bind_tools(" in blocks[2]
    assert '"error"' in blocks[3]


def stand_in_terminal(tree: Path, tmp_path: Path) -> dict[str, str]:
    """The demo's second terminal, with the model APIs' clients the stand-ins."""
    env = instance.demo_terminal(tree)
    return {**env, "PYTHONPATH": str(model_apis.stand_ins(tmp_path / "model-apis"))}


@pytest.mark.django_db(transaction=True)
def test_every_python_block_of_the_tools_page_runs_as_it_says_and_again(tmp_path: Path) -> None:
    tree = newcomer.clone(tmp_path / "memory")
    env = stand_in_terminal(tree, tmp_path)
    blocks = newcomer.python_blocks(PAGE)
    # NOTE: twice, pasted (the console also echoes what it evaluates) and then saved: the first
    # block starts by forgetting the page's user, so a reader may run the page again (the
    # stand-ins check that each run starts from an empty memory).
    newcomer.run_page_blocks(tree, PAGE, env, pasted=True)
    printed = newcomer.run_page_blocks(tree, PAGE, env)
    assert [out.splitlines() for out in printed] == [PRINTED.findall(b) for b in blocks]
    assert selectors.context_get(owner_id="zhou")["facts"] == {
        "location": "Shanghai",
        "name": "Zhou Jie",
        "preferred_name": "Jim",
    }
    assert tools.call("get_profile", {}, owner_id="li") == {"facts": {}}
