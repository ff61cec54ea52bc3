"""Tests of docs/python-api.md: its Python block runs both ways the page says, pasted into a
plain ``manage.py shell`` and then saved as ``example.py``, with the demo's settings
(``.tmp/demo.env``), in a fresh copy of the project, on the real servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory import selectors
from tests import instance, newcomer
from tests.instance import ROOT

PAGE = ROOT / "docs" / "python-api.md"


def test_the_python_api_page_shows_the_writes_and_the_reads():
    (block,) = newcomer.python_blocks(PAGE)
    for name in ("turn_append(", "fact_put(", "facts_merge(", "fact_delete(", "context_get("):
        assert name in block
    assert "expires_at=in_a_week" in block and "in_a_week = " in block
    assert block.startswith("import") and "services.memory_forget(owner_id=" in block


@pytest.mark.django_db(transaction=True)
def test_the_python_api_page_runs_as_it_says_and_again(tmp_path: Path) -> None:
    tree = newcomer.clone(tmp_path / "memory")
    env = instance.demo_terminal(tree)
    # NOTE: twice, pasted and then saved: the example starts by forgetting its user.
    for pasted in (True, False):
        newcomer.run_page_blocks(tree, PAGE, env, pasted=pasted)
    context = selectors.context_get(owner_id="zhao")
    assert context["facts"] == {"city": "Beijing", "name": "Zhao Lei", "trip": "Tokyo"}
    assert context["turns"] == []
