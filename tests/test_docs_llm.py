"""Tests of docs/llm.md: every Python block runs both ways the page says, pasted into ``manage.py
shell`` and then saved as ``example.py``, with the demo's settings (``.tmp/demo.env``), in a fresh
copy of the project, on the real servers, so that the examples cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory import selectors, tokens
from tests import instance, newcomer
from tests.instance import ROOT

LLM = ROOT / "docs" / "llm.md"


def test_the_llm_page_shows_sync_async_and_langchain_code():
    blocks = newcomer.python_blocks(LLM)
    assert len(blocks) == 4
    assert "selectors.context_messages(" in blocks[1]
    assert "asyncio.run(" in blocks[2] and "await selectors.acontext_messages(" in blocks[2]
    assert "RunnableWithMessageHistory(" in blocks[3]
    assert all("assert " in block for block in blocks)


@pytest.mark.django_db(transaction=True)
def test_every_python_block_of_the_llm_page_runs_as_it_says_and_again(tmp_path: Path) -> None:
    tree = newcomer.clone(tmp_path / "memory")
    env = instance.demo_terminal(tree)
    # NOTE: twice, pasted into the shell and then saved and run, as the page offers: each
    # example starts by forgetting its user, so a reader may run it again.
    for pasted in (True, False):
        newcomer.run_page_blocks(tree, LLM, env, pasted=pasted)
    assert selectors.context_get(owner_id="zhang")["facts"]["name"] == "Zhang Wei"
    assert [t["session_id"] for t in selectors.context_get(owner_id="han")["turns"]] == [
        "laptop",
        "laptop",
        "phone",
        "phone",
    ]


def test_the_example_context_counts_as_the_page_says():
    messages = [
        "Known facts about the user:\n- name: Wang Jianguo",
        "My name is Wang Jianguo",
        "Nice to meet you!",
    ]
    page = LLM.read_text(encoding="utf-8")
    total = sum(tokens.estimate_counter(text) for text in messages)
    assert f'"tokens": {total}}}' in page
