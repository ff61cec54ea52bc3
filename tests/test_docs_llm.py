"""Tests of the docs: every Python block of docs/llm.md runs, in order, on the real servers, so
that the examples cannot rot."""

from __future__ import annotations

import asyncio
import re

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from memory import selectors, tokens
from tests.instance import ROOT

LLM = ROOT / "docs" / "llm.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def python_blocks(path):
    return PYTHON_BLOCK.findall(path.read_text(encoding="utf-8"))


def test_the_llm_page_shows_sync_async_and_langchain_code():
    blocks = python_blocks(LLM)
    assert len(blocks) == 4
    assert "selectors.context_messages(" in blocks[1]
    assert "asyncio.run(" in blocks[2] and "await selectors.acontext_messages(" in blocks[2]
    assert "RunnableWithMessageHistory(" in blocks[3]
    assert all("assert " in block for block in blocks)


@pytest.mark.filterwarnings("ignore::langchain_core._api.deprecation.LangChainDeprecationWarning")
@pytest.mark.django_db(transaction=True)
def test_every_python_block_of_the_llm_page_runs():
    try:
        for number, block in enumerate(python_blocks(LLM), 1):
            code = compile(block, f"{LLM.name}, python block {number}", "exec")
            exec(code, {"__name__": f"docs_llm_{number}"})
    finally:
        # NOTE: the async block's sync code ran in asgiref's thread, on a connection of its own.
        asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())
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
