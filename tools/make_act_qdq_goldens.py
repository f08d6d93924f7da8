#!/usr/bin/env python3
"""Goldens of AutoRound's FP8_STATIC activation QDQ for tests/test_act_qdq.cpp: the forward and the
gradients autograd takes through it with respect to the input and to act_max_scale, as AutoRound's
WrapperLinear._qdq_act calls it (quant_fp8_sym, act_group_size 0, tensor_max = the calibration maximum).

Not part of the test suite and not run in CI. Needs a virtual environment outside the repository with
torch and auto-round 0.16.1 (made with torch 2.15.0 on the CPU). From the repository root:

    /work/arvenv/bin/python tools/make_act_qdq_goldens.py --out tests/data/fp_goldens/act_qdq.safetensors

For each case C, all float32:
  C/x [rows, cols]   the input (seeded normal with outliers, a few exact zeros and values on the clip)
  C/act_max [1]      the maximum passed as tensor_max; C/coef [1]: act_max_scale
  C/y [rows, cols]   the QDQ input; C/scale [1]: the scale it used
  C/dy [rows, cols]  a seeded upstream gradient; C/dx and C/dcoef [1]: the gradients of sum(y * dy)
"""
from __future__ import annotations

import argparse

import torch
from safetensors.torch import save_file

from auto_round.data_type.fp8 import quant_fp8_sym

# name, rows, cols, act_max relative to max|x|, act_max_scale
CASES = [
    ("inside", 6, 40, 1.0, 1.0),      # no element clipped
    ("clipped", 8, 48, 1.0, 0.55),    # the coefficient clips the largest elements
    ("loose", 5, 24, 3.0, 0.9),       # a maximum above the data (an earlier batch's)
    ("floor", 4, 16, 1e-6, 1.0),      # the scale at vLLM's floor: no gradient to the coefficient
]


def make_case(name, rows, cols, rel, coef, g):
    x = torch.randn(rows, cols, generator=g) * 0.7
    idx = torch.randint(0, rows * cols, (max(2, rows * cols // 20),), generator=g)
    x.view(-1)[idx[: len(idx) // 2]] *= 9.0
    x.view(-1)[idx[len(idx) // 2:]] = 0.0
    amax = x.abs().max() * rel
    amax = amax.reshape(1).float()
    if name == "clipped":  # one element exactly on the clip boundary after scaling
        s = (amax * coef) / 448.0
        x.view(-1)[1] = float(s * 448.0) * 1.0
    xg = x.clone().requires_grad_(True)
    cg = torch.tensor(coef, dtype=torch.float32).requires_grad_(True)
    y, scale, _ = quant_fp8_sym(xg, max_scale=cg, tensor_max=amax, group_size=0)
    dy = torch.randn(rows, cols, generator=g)
    (y * dy).sum().backward()
    return {
        f"{name}/x": x, f"{name}/act_max": amax, f"{name}/coef": cg.detach().reshape(1),
        f"{name}/y": y.detach(), f"{name}/scale": scale.detach().reshape(1), f"{name}/dy": dy,
        f"{name}/dx": xg.grad, f"{name}/dcoef": cg.grad.reshape(1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(1234)
    t = {}
    for c in CASES:
        t.update(make_case(*c, g))
    save_file({k: v.contiguous().float() for k, v in t.items()}, args.out)
    print(f"wrote {len(t)} tensors to {args.out}")


if __name__ == "__main__":
    main()
