"""Tests of memory.tokens: the default estimate, tiktoken's count offline, and the setting that
chooses the counter."""

from __future__ import annotations

import os

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from memory import tokens


def characters(text: str) -> int:
    """A counter for tests: one token per character."""
    return len(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("   \n\t", 0),
        ("hi", 1),
        ("name", 1),
        ("Jianguo", 2),
        ("My name is Wang Jianguo", 6),
        ("Hello, world!", 6),
        ("我喜欢打篮球", 6),
        ("我叫王建国，我住在上海。", 12),
        ("こんにちは", 5),
        ("안녕하세요", 5),
        ("I like 篮球!", 5),
        ("abc中文def", 4),
        ("🙂🙂", 2),
        ("12345", 2),
    ],
)
def test_estimate_counts_cjk_characters_one_each_and_words_by_four(text, expected):
    assert tokens.estimate_counter(text) == expected


def test_estimate_grows_with_the_text():
    text = "My name is Wang Jianguo, 我喜欢打篮球. "
    assert tokens.estimate_counter(text * 10) == 10 * tokens.estimate_counter(text)


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_the_estimate_of_ascii_text_is_the_general_patterns(text):
    """ASCII text is cut by a pattern of its own; it finds the pieces the general one does (white
    space by Unicode's rules: \x1c-\x1f are spaces, \x7f and NUL are not)."""
    general = sum((len(piece) + 3) // 4 for piece in tokens._PIECES.findall(text))
    assert tokens.estimate_counter(text) == general


def test_the_default_counter_is_the_estimate():
    with override_settings(MEMORY={}):
        assert tokens.counter_get() is tokens.estimate_counter


def test_the_counter_is_the_setting_read_on_each_call():
    with override_settings(MEMORY={"TOKEN_COUNTER": "tests.test_tokens.characters"}):
        assert tokens.counter_get()("我喜欢 you") == 7
    with override_settings(MEMORY={"TOKEN_COUNTER": "builtins.len"}):
        assert tokens.counter_get() is len


@pytest.mark.parametrize(
    "path", ["memory.tokens.nothing", "nowhere.at_all", "memory.tokens.MAX_TOKENS", 7]
)
def test_a_bad_counter_path_is_improperly_configured_naming_the_setting(path):
    with (
        override_settings(MEMORY={"TOKEN_COUNTER": path}),
        pytest.raises(ImproperlyConfigured, match=r"MEMORY\['TOKEN_COUNTER'\]"),
    ):
        tokens.counter_get()


def test_tiktoken_counter_without_its_encoding_cached_never_downloads(monkeypatch, tmp_path):
    # NOTE: an empty cache; a download would be an outside host, which tests never reach.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    if tokens.tiktoken_unavailable() is None:
        pytest.skip("o200k_base is already loaded in this process")
    assert "o200k_base" in (tokens.tiktoken_unavailable() or "")
    with pytest.raises(ImproperlyConfigured, match="not in its cache"):
        tokens.tiktoken_counter("hello")
    assert os.listdir(tmp_path) == []


def test_tiktoken_counter_with_its_cache_turned_off_cannot_count(monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    if tokens.tiktoken_unavailable() is None:
        pytest.skip("o200k_base is already loaded in this process")
    with pytest.raises(ImproperlyConfigured, match="caching is off"):
        tokens.tiktoken_counter("hello")


def test_tiktoken_counter_counts_offline():
    pytest.importorskip("tiktoken", reason="tiktoken is not installed: pip install tiktoken")
    problem = tokens.tiktoken_unavailable()
    if problem is not None:
        pytest.skip(f"tiktoken cannot count offline here: {problem}")
    assert tokens.tiktoken_counter("") == 0
    assert tokens.tiktoken_counter("hello world") == 2
    assert tokens.tiktoken_counter("我喜欢打篮球") > 0
    # NOTE: special-token text is counted as text, never refused.
    assert tokens.tiktoken_counter("<|endoftext|>") > 1


counted_texts: list[str] = []


def recording(text: str) -> int:
    """A counter that records what it was asked to count."""
    counted_texts.append(text)
    return len(text)


def test_a_long_text_is_counted_once_per_process(monkeypatch):
    tokens.memo.clear()
    counted_texts.clear()
    long, other, short = "a" * tokens.MEMO_MIN_CHARS, "b" * tokens.MEMO_MIN_CHARS, "short"
    with override_settings(MEMORY={"TOKEN_COUNTER": "tests.test_tokens.recording"}):
        count = tokens.counter_remembering()
        assert [count(text) for text in (long, long, other, short, short)] == [
            len(long),
            len(long),
            len(other),
            5,
            5,
        ]
        assert counted_texts == [long, other, short, short]
    # Counts are kept per counter: another counter counts the text itself.
    with override_settings(MEMORY={"TOKEN_COUNTER": "memory.tokens.estimate_counter"}):
        assert tokens.counter_remembering()(long) == tokens.estimate_counter(long)
    # The memo is bounded: the least recently used count goes first.
    monkeypatch.setattr(tokens, "MEMO_SIZE", 2)
    with override_settings(MEMORY={"TOKEN_COUNTER": "tests.test_tokens.recording"}):
        count = tokens.counter_remembering()
        counted_texts.clear()
        count("c" * tokens.MEMO_MIN_CHARS)
        count(long)
        assert counted_texts == ["c" * tokens.MEMO_MIN_CHARS, long]
    tokens.memo.clear()
