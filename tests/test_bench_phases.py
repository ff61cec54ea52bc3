"""Tests of ``bench/phases.py`` (``python -m bench --phases``): how a call's clock marks split into
phases, and that the marks come from the real clients' statements and commands."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.db import connection

from bench import phases

pytestmark = pytest.mark.django_db


def test_a_call_of_one_statement_then_one_command_splits_into_four_phases():
    marks = [("sql", 1.5), ("sql_done", 4.0), ("redis", 4.25)]
    assert phases.phases_of(1.0, marks, 5.0) == (0.5, 2.5, 0.25, 0.75)


@pytest.mark.parametrize(
    "kinds",
    [
        [],
        ["sql", "sql_done"],
        ["redis", "sql", "sql_done"],
        ["sql", "sql_done", "sql", "sql_done", "redis"],
        ["sql", "sql_done", "redis", "redis"],
    ],
)
def test_a_call_of_any_other_shape_is_left_out(kinds: list[str]):
    marks = [(kind, float(i)) for i, kind in enumerate(kinds, start=1)]
    assert phases.phases_of(0.0, marks, 10.0) is None


def test_the_clock_marks_a_real_statement_and_a_real_command_then_lets_go(redis_client: Any):
    def call() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        redis_client.ping()

    with phases._clocked():
        split = phases._call(call)
    assert split is not None
    assert all(part >= 0 for part in split)
    # NOTE: outside the block the clients are their own again: nothing is marked.
    assert phases._call(call) is None


def test_a_backend_s_cpu_is_read_only_from_a_postgresql_process_here():
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    seconds = phases._backend_seconds(pid)
    assert seconds is not None and seconds >= 0
    # NOTE: a pid that is not a PostgreSQL process here (as a remote server's would be) is not read.
    assert phases._backend_seconds(os.getpid()) is None


def test_a_call_far_above_the_median_call_s_script_time_counts_as_a_fold():
    mean, median, share, fold = phases.script_split([10, 10, 12, 11, 40, 10, 50])
    assert median == 11
    assert share == pytest.approx(2 / 7)
    assert fold == 45
    assert mean == pytest.approx(143 / 7)


def test_calls_near_their_median_have_no_fold():
    assert phases.script_split([5, 5, 6]) == (pytest.approx(16 / 3), 5, 0.0, 0.0)


def test_each_call_s_script_time_is_read_from_the_real_server(redis_client: Any):
    # NOTE: a script that spins for about a millisecond: other tests' scripts on the same server
    # can only add to a call's time, never hide this one's.
    busy = "local n = 0 for i = 1, 200000 do n = n + i end return 1"

    times = phases._script_times(lambda: redis_client.eval(busy, 0), redis_client, 3)

    assert len(times) == 3
    assert all(t >= 200 for t in times)
