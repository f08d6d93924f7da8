#!/usr/bin/env python3
"""Goldens of AutoRound's floating-point QDQ (MXFP4/MXFP8 and their _RCEIL variants, NVFP4, FP8 per
channel / per tensor / per block) for tests/test_qdq_fp.cpp: the forward outputs and scales, and the
gradients autograd computes through AutoRound's straight-through estimators.

Not part of the test suite and not run in CI. Needs a virtual environment outside the repository with
torch and auto-round 0.16.1 (the goldens were made with torch 2.15.0 on the CPU). From the repository root:

    /work/arvenv/bin/python tools/make_fp_goldens.py --out tests/data/fp_goldens/qdq_fp.safetensors

For each case C the file holds, all float32:
  C/W [out, in]        the weight (seeded normal, a few outliers, a few exact zeros)
  C/V [out, padded_in] the rounding offsets in our layout (groups padded along `in`); AutoRound's own
                       layout (its reshape_pad_tensor_by_group_size) is made from it here
  C/beta [tiles]       max_scale, one per group / channel / tensor / block, row-major over the tiles
  C/G [1]              NVFP4 only: the global scale passed to nv_fp4 (calculate_gparam of W)
  C/What [out, in]     the QDQ weight; C/scale [tiles]: the returned scale (MX: the shared exponent,
                       NVFP4: the e4m3 block scale, FP8: s)
  C/dWhat [out, in]    a seeded upstream gradient; C/dV [out, padded_in] and C/dbeta [tiles]: the
                       gradients of sum(What * dWhat) with respect to V and max_scale
"""
from __future__ import annotations

import argparse
import math

import torch
from safetensors.torch import save_file

from auto_round.data_type.fp8 import quant_block_fp_sym, quant_fp8_sym
from auto_round.data_type.mxfp import quant_mx, quant_mx_rceil
from auto_round.data_type.nvfp import calculate_gparam, nv_fp4

# name, function, kwargs, out, in, tile (rows, cols) of one scale
CASES = [
    ("mxfp4", quant_mx, dict(bits=4, group_size=32, data_type="mx_fp"), 6, 80, (1, 32)),
    ("mxfp4_rceil", quant_mx_rceil, dict(bits=4, group_size=32, data_type="mx_fp"), 6, 80, (1, 32)),
    ("mxfp8", quant_mx, dict(bits=8, group_size=32, data_type="mx_fp"), 4, 64, (1, 32)),
    ("mxfp8_rceil", quant_mx_rceil, dict(bits=8, group_size=32, data_type="mx_fp"), 4, 64, (1, 32)),
    ("nvfp4", nv_fp4, dict(bits=4, group_size=16), 6, 40, (1, 16)),
    ("fp8_channel", quant_fp8_sym, dict(group_size=-1), 8, 48, (1, 48)),
    ("fp8_tensor", quant_fp8_sym, dict(group_size=0), 8, 48, (8, 48)),
    ("fp8_block", quant_block_fp_sym, dict(group_size=(32, 32)), 40, 72, (32, 32)),
]


def weight(out: int, inn: int, g: torch.Generator) -> torch.Tensor:
    rows = torch.randn(out, 1, generator=g).abs() * 0.05 + 0.005  # rows of different magnitude
    w = torch.randn(out, inn, generator=g) * rows
    idx = torch.randint(0, out * inn, (max(2, out * inn // 50),), generator=g)
    w.view(-1)[idx[: len(idx) // 2]] *= 8.0  # outliers
    w.view(-1)[idx[len(idx) // 2:]] = 0.0  # exact zeros
    return w


def make_case(name, fn, kwargs, out, inn, tile, g):
    tr, tc = tile
    td, ta = math.ceil(out / tr), math.ceil(inn / tc)
    pin = ta * tc
    W = weight(out, inn, g)
    V_nat = torch.rand(out, pin, generator=g) - 0.5
    beta = torch.rand(td * ta, generator=g) * 0.5 + 0.5
    beta[::3] = 1.0
    dWhat = torch.randn(out, inn, generator=g)

    # AutoRound's layouts of V and max_scale for this tile.
    if isinstance(kwargs["group_size"], tuple):
        full = torch.zeros(td * tr, pin)
        full[:out] = V_nat
        v = full.view(td, tr, ta, tc).permute(0, 2, 1, 3).contiguous()
        ms = beta.view(td, ta).clone()
    elif kwargs["group_size"] == 0:
        v = V_nat.reshape(1, -1).clone()
        ms = beta.clone()
    elif kwargs["group_size"] == -1:
        v = V_nat.clone()
        ms = beta.clone()
    else:
        v = V_nat.reshape(-1, tc).clone()
        ms = beta.clone()
    v.requires_grad_(True)
    ms.requires_grad_(True)
    extra = {}
    if fn is nv_fp4:
        extra["global_scale"] = calculate_gparam(W, 16)
    qdq, scale, _ = fn(W, v=v, max_scale=ms, **kwargs, **extra)
    (qdq * dWhat).sum().backward()

    if isinstance(kwargs["group_size"], tuple):
        dv = v.grad.permute(0, 2, 1, 3).reshape(td * tr, pin)[:out]
    else:
        dv = v.grad.reshape(out, pin)
    res = {
        "W": W, "V": V_nat, "beta": beta, "dWhat": dWhat,
        "What": qdq.detach(), "scale": scale.detach().reshape(-1).float(),
        "dV": dv.detach(), "dbeta": ms.grad.detach().reshape(-1),
    }
    if fn is nv_fp4:
        res["G"] = extra["global_scale"].reshape(1).float()
    return {f"{name}/{k}": t.contiguous().float() for k, t in res.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(20261202)
    tensors = {}
    for case in CASES:
        tensors.update(make_case(*case, g))
    import auto_round
    save_file(tensors, args.out, metadata={"torch": torch.__version__, "auto_round": auto_round.__version__})
    print(f"wrote {len(tensors)} tensors to {args.out}")


if __name__ == "__main__":
    main()
