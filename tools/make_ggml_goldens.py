#!/usr/bin/env python3
"""Golden data for tests/test_ggml_blocks.cpp: ggml block bytes and what gguf-py makes of them.

Run with a Python that has the `gguf` package (gguf-py, llama.cpp's Python library) and numpy:
    /work/arvenv/bin/python tools/make_ggml_goldens.py [out_dir]
(default out_dir: tests/data/ggml_goldens). The output is deterministic for a given seed and versions.

For every type we read or write (f16, bf16, the legacy 32-blocks, the k-quant 256-blocks) it writes
random but valid rows of 256 elements: random bytes with the fp16 d / dmin fields replaced by finite
values of varied magnitude (random bytes are valid codes and sub-scales for these types; a random d
could be NaN or inf), plus an all-zero-codes row and an all-ones-bits row. For each it stores
gguf.quants.dequantize's fp32 output: in full for the first rows, and as a 64-bit FNV-1a hash of the
little-endian fp32 bytes of every row (that keeps the folder small; a hash mismatch is then
diagnosed on the full rows). For the legacy types it also stores gguf.quants.quantize's bytes of
shared random fp32 rows (with blocks crafted to hit rounding ties and the d == 0 cases).

File dequant_<type>.bin: n_rows * row_bytes block bytes | n_full * 256 fp32 | n_rows uint64 hashes.
File quantize_input.bin: n_rows * 256 fp32; quantize_<type>.bin: the quantized rows' bytes.
index.json describes them.
"""
import json
import os
import sys
from importlib.metadata import version

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

ROW = 256
SEED = 20240613
# name -> (type, rows, full rows, byte offsets of the fp16 d / dmin fields inside a block)
DEQUANT = {
    "f16": (T.F16, 8, 8, None),
    "bf16": (T.BF16, 8, 8, None),
    "q4_0": (T.Q4_0, 40, 6, [0]),
    "q4_1": (T.Q4_1, 40, 6, [0, 2]),
    "q5_0": (T.Q5_0, 40, 6, [0]),
    "q5_1": (T.Q5_1, 40, 6, [0, 2]),
    "q8_0": (T.Q8_0, 40, 6, [0]),
    "q2_k": (T.Q2_K, 200, 6, [80, 82]),
    "q3_k": (T.Q3_K, 200, 6, [108]),
    "q4_k": (T.Q4_K, 200, 6, [0, 2]),
    "q5_k": (T.Q5_K, 200, 6, [0, 2]),
    "q6_k": (T.Q6_K, 200, 6, [208]),
}
QUANTIZE = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"]
QUANT_ROWS = 32


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def random_f16(rng, n):
    """Finite fp16 values from 1e-5 to ~10 in magnitude, both signs, with zeros and subnormals mixed in."""
    v = rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 0, n)
    special = rng.integers(0, 16, n)
    v = np.where(special == 0, 0.0, v)
    v = np.where(special == 1, rng.integers(-1023, 1024, n) * 2.0**-24, v)  # fp16 subnormals
    return v.astype(np.float16)


def finite_16bit(rng, n, exp_mask, mant_mask):
    """Random 16-bit float patterns with NaNs replaced by random finite ones (infs kept)."""
    u = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
    nan = ((u & exp_mask) == exp_mask) & ((u & mant_mask) != 0)
    return np.where(nan, u & ~np.uint16(exp_mask) & np.uint16(0xFFFF), u).astype(np.uint16)


def dequant_blocks(rng, name):
    qtype, rows, _, d_at = DEQUANT[name]
    elems, bsize = GGML_QUANT_SIZES[qtype]
    if d_at is None:
        masks = (0x7C00, 0x03FF) if name == "f16" else (0x7F80, 0x007F)
        return finite_16bit(rng, rows * ROW, *masks).view(np.uint8).reshape(rows, -1)
    nb = rows * ROW // elems
    blocks = rng.integers(0, 256, (nb, bsize), dtype=np.uint8)
    per_row = ROW // elems
    blocks[:per_row] = 0  # row 0: every code, sub-scale and min zero
    blocks[per_row:2 * per_row] = 0xFF  # row 1: every bit set
    for off in d_at:
        blocks[:, off:off + 2] = random_f16(rng, nb).view(np.uint8).reshape(nb, 2)
    return blocks.reshape(rows, -1)


def crafted_block(rng, kind):
    """32 floats that hit the quantizers' edge cases."""
    k = rng.integers(-7, 7, 32).astype(np.float32)
    if kind == 0:  # all zero: d == 0, the id = 0 branch
        return np.zeros(32, np.float32)
    if kind == 1:  # constant: max == min for the _1 types
        return np.full(32, np.float32(rng.standard_normal()), np.float32)
    if kind == 2:  # q4_0: first amax element -8 gives d = 1; x + 8.5 lands on integers
        b = k + np.float32(0.5)
        b[0] = -8
        return b
    if kind == 3:  # q8_0: d = 1; x = k + 0.5 are ties (round half away from zero)
        b = rng.integers(-126, 126, 32).astype(np.float32) + np.float32(0.5)
        b[5] = 127
        return b
    if kind == 4:  # q4_1: min 0, max 15, d = 1, (x - min) + 0.5 on integers
        b = np.abs(k) + np.float32(0.5)
        b[0], b[1] = 0, 15
        return b
    b = rng.standard_normal(32).astype(np.float32)  # +-amax tie: the first one sets the sign of d
    b[3], b[9] = 4, -4
    return b


def quantize_input(rng):
    x = rng.standard_normal((QUANT_ROWS, ROW)) * 10.0 ** rng.uniform(-4, 3, (QUANT_ROWS, 1))
    x = x.astype(np.float32)
    for r in range(4):  # four rows of crafted blocks (8 blocks a row, kinds cycled)
        for j in range(8):
            x[r, 32 * j:32 * (j + 1)] = crafted_block(rng, (8 * r + j) % 6)
    return x


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "data", "ggml_goldens")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    index = {"format": 1, "row_elems": ROW, "gguf_py": version("gguf"), "numpy": np.__version__, "seed": SEED,
             "hash": "FNV-1a 64 of each row's little-endian fp32 output", "dequant": [], "quantize": {}}
    for name, (qtype, rows, full, _) in DEQUANT.items():
        blocks = dequant_blocks(rng, name)
        y = dequantize(blocks, qtype).astype(np.float32).reshape(rows, ROW)
        hashes = np.array([fnv1a64(r.astype("<f4").tobytes()) for r in y], dtype="<u8")
        fname = f"dequant_{name}.bin"
        with open(os.path.join(out, fname), "wb") as f:
            f.write(blocks.tobytes() + y[:full].astype("<f4").tobytes() + hashes.tobytes())
        elems, bsize = GGML_QUANT_SIZES[qtype]
        index["dequant"].append({"type": name, "id": int(qtype), "block_elems": elems, "block_bytes": bsize,
                                 "n_rows": rows, "n_full": full, "file": fname})
    x = quantize_input(rng)
    with open(os.path.join(out, "quantize_input.bin"), "wb") as f:
        f.write(x.astype("<f4").tobytes())
    index["quantize"] = {"input": "quantize_input.bin", "n_rows": QUANT_ROWS, "outputs": []}
    for name in QUANTIZE:
        q = quantize(x, DEQUANT[name][0])
        fname = f"quantize_{name}.bin"
        with open(os.path.join(out, fname), "wb") as f:
            f.write(q.tobytes())
        index["quantize"]["outputs"].append({"type": name, "file": fname})
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
