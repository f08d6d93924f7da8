#!/usr/bin/env python3
"""AutoRound's optimized RTN for the float schemes (its --iters 0 default), for
tests/test_opt_rtn_fp.cpp: per case, a weight, an imatrix (with zero entries, to exercise its repair),
the QDQ weight auto-round 0.16.1 returns (quant_mx_opt_rtn, opt_rtn_fast_nvfp4) and the searched
coefficient per block (search_mx_scale, search_nvfp4_scale).

Not part of the test suite and not run in CI. Needs the venv outside the repository (torch 2.15.0,
auto-round 0.16.1, CPU). From the repository root:

    /work/arvenv/bin/python tools/make_fp_opt_rtn_goldens.py --out tests/data/fp_goldens/opt_rtn_fp.safetensors

Tensors per case NAME ("mxfp4", "mxfp8", "nvfp4"): NAME/W [64, 128], NAME/imatrix [128],
NAME/What [64, 128], NAME/init [64 * 128 / block]; nvfp4 also NAME/G [1] (the global scale passed in,
calculate_gparam of W, as AutoRound's wrapper computes it).
"""
from __future__ import annotations

import argparse

import torch
from safetensors.torch import save_file

from auto_round.data_type.mxfp import quant_mx_opt_rtn, search_mx_scale
from auto_round.data_type.nvfp import calculate_gparam, opt_rtn_fast_nvfp4, search_nvfp4_scale
from auto_round.data_type.utils import reshape_pad_tensor_by_group_size
from auto_round.data_type.gguf import _imatrix_handle_zero


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(20261203)
    out = {}
    for name, bits, block in (("mxfp4", 4, 32), ("mxfp8", 8, 32), ("nvfp4", 4, 16)):
        W = torch.randn(64, 128, generator=g) * 0.05
        W[3, :] *= 8  # a row with a wide range
        W[5, 0:block] = 0  # an all-zero block
        imat = torch.rand(128, generator=g) * 2 + 0.01
        imat[7] = 0  # one zero in a block: filled with the block's mean
        imat[2 * block:2 * block + block // 2 + 1] = 0  # more than half zero: |w| + rms
        if name == "nvfp4":
            G = calculate_gparam(W, 16)
            What, _, _ = opt_rtn_fast_nvfp4(W.clone(), bits=4, group_size=16, global_scale=G, imatrix=imat.clone())
            t, _, _ = reshape_pad_tensor_by_group_size(W.clone(), 16)
            qw = imat.reshape(1, -1)
            qw = reshape_pad_tensor_by_group_size(qw, 16, val=1e-5)[0].view(1, -1)
            qw = qw.expand(t.numel() // qw.numel(), -1).reshape(t.shape)
            qw = _imatrix_handle_zero(qw, t, 4, 16)
            init = search_nvfp4_scale(t, 4, qw)
            out[f"{name}/G"] = G.reshape(1).float()
        else:
            What, _, _ = quant_mx_opt_rtn(W.clone(), bits=bits, group_size=32, data_type="mx_fp" + str(bits),
                                          imatrix=imat.clone())
            t, _, _ = reshape_pad_tensor_by_group_size(W.clone(), 32)
            qw = imat.reshape(1, -1)
            qw = reshape_pad_tensor_by_group_size(qw, 32, val=1e-5)[0].view(1, -1)
            qw = qw.expand(t.numel() // qw.numel(), -1).reshape(t.shape)
            qw = _imatrix_handle_zero(qw, t, bits, 32)
            init = search_mx_scale(t, bits, qw=qw, data_type="mx_fp" + str(bits))
        out[f"{name}/W"] = W
        out[f"{name}/imatrix"] = imat
        out[f"{name}/What"] = What.float()
        out[f"{name}/init"] = init.reshape(-1).float()
        print(name, "coefficients:", sorted(set(init.reshape(-1).tolist()))[:12])
    save_file({k: v.contiguous() for k, v in out.items()}, args.out)


if __name__ == "__main__":
    main()
