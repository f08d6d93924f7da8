#!/usr/bin/env python3
"""One Gated DeltaNet layer (transformers' Qwen3NextGatedDeltaNet) on random inputs, for
tests/test_delta_net_layer.cpp: the layer's weights, its input and the output transformers computes
(float32, the reference chunked delta rule with chunks of 64 and the reference causal conv).

Not part of the test suite and not run in CI. Needs a virtual environment outside the repository with
torch and transformers 5 (made with torch 2.x, transformers 5.25, on the CPU). From the repository root:

    /work/venv/bin/python tools/make_delta_net_goldens.py --out tests/data/delta_net

Writes <out>/layer.safetensors (float32): in_proj_qkvz [80, 32], in_proj_ba [8, 32], conv1d [56, 4],
dt_bias [4], A_log [4], norm [6], out_proj [32, 24], x [2, 70, 32], y [2, 70, 32]; and <out>/layer.json
with the shape (hidden 32, 2 key heads of 8, 4 value heads of 6, conv kernel 4, rms_norm_eps 1e-6). The
70-token sequences cross the chunk boundary of transformers' chunked form; A_log spreads the decays from
near 1 to near 0.
"""
from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402


def main() -> None:
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    shape = dict(hidden_size=32, linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=6,
                 linear_num_key_heads=2, linear_num_value_heads=4, rms_norm_eps=1e-6)
    cfg = Qwen3NextConfig(vocab_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=8, moe_intermediate_size=16, shared_expert_intermediate_size=16,
                          num_experts=4, num_experts_per_tok=2, layer_types=["linear_attention", "full_attention"], **shape)
    torch.manual_seed(5)
    layer = Qwen3NextForCausalLM(cfg).float().eval().model.layers[0].linear_attn
    with torch.no_grad():
        for n, p in layer.named_parameters():
            if n == "A_log":
                p.copy_(torch.tensor([-4.0, -1.0, 0.5, 2.0]))  # exp(A): 0.018 .. 7.4
            elif n == "dt_bias":
                p.normal_(0, 1)
            elif n == "norm.weight":
                p.normal_(1, 0.2)
            else:
                p.normal_(0, 0.3)
    x = torch.randn(2, 70, 32)
    with torch.no_grad():
        y = layer(x)
    os.makedirs(a.out, exist_ok=True)
    w = {n.replace(".weight", ""): p.detach().clone() for n, p in layer.named_parameters()}
    w["conv1d"] = w["conv1d"].reshape(w["conv1d"].shape[0], -1)
    save_file({**{k: v.contiguous() for k, v in w.items()}, "x": x, "y": y}, os.path.join(a.out, "layer.safetensors"))
    with open(os.path.join(a.out, "layer.json"), "w") as f:
        json.dump(shape, f, indent=2)
    print({k: tuple(v.shape) for k, v in w.items()}, float(y.abs().max()))


if __name__ == "__main__":
    main()
