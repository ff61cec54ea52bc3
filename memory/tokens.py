"""Token counters for ``MEMORY["TOKEN_COUNTER"]``: the default estimate, tiktoken's offline count,
and ``counter_get()``, which resolves the setting on each use and remembers long texts' counts."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from memory.conf import callable_import, conf

TokenCounter = Callable[[str], int]

# Largest ``max_tokens`` a caller may ask for: above any model's context window.
MAX_TOKENS = 10_000_000

# The encoding ``tiktoken_counter`` counts with (GPT-4o and later models).
TIKTOKEN_ENCODING = "o200k_base"

# Characters of scripts written without spaces, each about a token: CJK ideographs, radicals, kana,
# bopomofo, Hangul, CJK and full-width punctuation.
_CJK = (
    "\u1100-\u11ff\u2e80-\u2fdf\u2ff0-\u9fff\ua960-\ua97f\uac00-\ud7ff"
    "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003ffff"
)
# A CJK character, a word of other letters and digits, or any other character but white space.
_PIECES = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|\S")
# The same pieces in ASCII text (``str.isascii`` is a flag, no scan), by byte classes without the
# Unicode lookups of ``\w`` and ``\S``: Unicode's white space among ASCII includes \x1c-\x1f.
_ASCII_PIECES = re.compile(r"[A-Za-z0-9_]+|[^A-Za-z0-9_ \t\n\r\x0b\x0c\x1c-\x1f]")


def estimate_counter(text: str) -> int:
    """An estimate of ``text``'s tokens that needs no tokenizer (the default counter).

    One per CJK character; one per started four characters of a word; one per other non-space
    character. It leans high for English; real tokenizers differ by model for Chinese. Where a
    budget is a hard limit, count with the model's own tokenizer. Never raises for a string.
    """
    pieces = (_ASCII_PIECES if text.isascii() else _PIECES).findall(text)
    return sum([(len(piece) + 3) // 4 for piece in pieces])


def _tiktoken_cache_path(encoding: str) -> str | None:
    """Where tiktoken keeps ``encoding``'s file once fetched, by its own rules; ``None`` when its
    cache is turned off (``TIKTOKEN_CACHE_DIR=""``)."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if cache_dir == "":
        return None
    blob = f"https://openaipublic.blob.core.windows.net/encodings/{encoding}.tiktoken"
    return os.path.join(cache_dir, hashlib.sha1(blob.encode()).hexdigest())


def tiktoken_unavailable() -> str | None:
    """Why ``tiktoken_counter`` cannot count here, or ``None`` when it can: tiktoken installed and
    ``o200k_base`` in its cache (the app never lets it download)."""
    try:
        import tiktoken.registry
    except ImportError:
        return "the tiktoken package is not installed (pip install tiktoken)"
    if TIKTOKEN_ENCODING in tiktoken.registry.ENCODINGS:
        return None
    path = _tiktoken_cache_path(TIKTOKEN_ENCODING)
    if path is None or not os.path.exists(path):
        return (
            f"tiktoken's {TIKTOKEN_ENCODING} encoding is not in its cache "
            f"({path or 'TIKTOKEN_CACHE_DIR is empty: caching is off'}); fetch it once where the "
            "network is reachable and point TIKTOKEN_CACHE_DIR at a copy"
        )
    return None


@functools.cache
def _tiktoken_encoding() -> Any:
    # NOTE: checked first: tiktoken would download a missing encoding. Only a success is cached.
    problem = tiktoken_unavailable()
    if problem is not None:
        raise ImproperlyConfigured(f"memory.tokens.tiktoken_counter cannot count: {problem}.")
    import tiktoken

    return tiktoken.get_encoding(TIKTOKEN_ENCODING)


def tiktoken_counter(text: str) -> int:
    """``text``'s tokens in tiktoken's ``o200k_base`` encoding (GPT-4o and later); special tokens
    count as plain text. Raises ``ImproperlyConfigured`` when tiktoken or the encoding is missing;
    never downloads anything."""
    return len(_tiktoken_encoding().encode(text, disallowed_special=()))


@functools.lru_cache(maxsize=8)
def _counter_import(path: str) -> TokenCounter:
    return callable_import("TOKEN_COUNTER", path)  # type: ignore[no-any-return]


# Texts at least this long have their counts remembered, and how many counts a process keeps.
MEMO_MIN_CHARS = 1024
MEMO_SIZE = 4096


class _Memo:
    """Token counts of long texts, by counter and a digest of the text, least recently used out.

    A context counts the same turns each time; a digest costs a fiftieth of counting them. The
    memo keeps digests, never texts.
    """

    def __init__(self) -> None:
        self._counts: OrderedDict[tuple[str, bytes], int] = OrderedDict()
        self._lock = threading.Lock()

    def count(self, path: str, counter: TokenCounter, text: str) -> int:
        if len(text) < MEMO_MIN_CHARS:
            return counter(text)
        key = (path, hashlib.blake2b(text.encode(), digest_size=16).digest())
        with self._lock:
            known = self._counts.get(key)
            if known is not None:
                self._counts.move_to_end(key)
                return known
        counted = counter(text)
        with self._lock:
            self._counts[key] = counted
            while len(self._counts) > MEMO_SIZE:
                self._counts.popitem(last=False)
        return counted

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()


memo = _Memo()


def counter_get() -> TokenCounter:
    """The callable ``MEMORY["TOKEN_COUNTER"]`` names, read on each call. Raises
    ``ImproperlyConfigured``, naming the setting, when it cannot be imported or called
    (``memory.E016``)."""
    path = conf.TOKEN_COUNTER
    if not isinstance(path, str):
        raise ImproperlyConfigured(f"MEMORY['TOKEN_COUNTER'] must be a dotted path, not {path!r}.")
    return _counter_import(path)


def counter_remembering() -> TokenCounter:
    """``counter_get()``'s counter, remembering the count of each text of ``MEMO_MIN_CHARS`` or more
    for the process. Raises as ``counter_get``."""
    counter = counter_get()
    return functools.partial(memo.count, conf.TOKEN_COUNTER, counter)


def count_remembering(text: str) -> int:
    """``counter_remembering()(text)`` for one text (an append's). Raises as ``counter_get``."""
    return memo.count(conf.TOKEN_COUNTER, counter_get(), text)
