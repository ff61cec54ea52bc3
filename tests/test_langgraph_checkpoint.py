"""Tests of memory.integrations.langgraph's checkpointer: LangGraph's own conformance suite
(langgraph-checkpoint-conformance), graphs that run on it, its owner rule, and the turns it
mirrors from a thread's messages."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from memory.integrations.langgraph import MemoryCheckpointSaver
from tests.loop import run


@pytest.mark.django_db(transaction=True)
def test_the_checkpointer_passes_langgraphs_conformance_suite_with_every_capability():
    @checkpointer_test(name="MemoryCheckpointSaver")
    async def saver() -> Any:
        yield MemoryCheckpointSaver(owner_id=f"conformance-{uuid.uuid4().hex[:8]}")

    async def main() -> Any:
        return await validate(saver, progress=ProgressCallbacks.verbose())

    report = run(main)
    report.print_report()
    assert report.passed_all_base()
    assert report.passed_all()
