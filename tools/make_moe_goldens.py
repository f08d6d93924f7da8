#!/usr/bin/env python3
"""Tiny random mixture-of-experts checkpoints and the logits transformers computes for them, for
tests/test_moe_model.cpp (model/arch/qwen3_moe.cpp, qwen2_moe.cpp, mixtral.cpp and model/moe_ffn.h).

Not part of the test suite and not run in CI. Needs a virtual environment outside the repository with
torch and transformers 5 (made with torch 2.15.0, transformers 5.24.0, on the CPU). From the repository
root:

    /work/arvenv/bin/python tools/make_moe_goldens.py --out tests/data/moe

For each case below it writes tests/data/moe/<case>/:
  per_expert/  config.json + model.safetensors as `save_pretrained` writes it (one tensor per expert
               Linear: mlp.experts.<e>.gate_proj.weight, or Mixtral's block_sparse_moe.experts.<e>.w1.weight);
  fused/       the same weights under transformers 5's in-memory names (`model.state_dict()`): the
               experts of a layer stacked as mlp.experts.gate_up_proj [E, 2I, H] and down_proj [E, H, I];
  expected.safetensors  ids [B, T] (int32) and the logits [B*T, vocab] transformers computes in float32
               from the bf16 weights, read back with from_pretrained (a model cast to bf16 in memory carries a
               bf16-rounded RoPE inv_freq buffer, whose logits differ by up to 2e-4 of the largest).
The router is drawn wider than the other weights so that no token sits near a routing tie.
"""
from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

COMMON = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=64, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
              rms_norm_eps=1e-6)


def cases():
    from transformers import (MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM,
                              Qwen3MoeConfig, Qwen3MoeForCausalLM)
    return {
        # Qwen3-MoE: q/k norm, top-3 of 8 renormalized, layer 0 dense (mlp_only_layers).
        "qwen3_moe": (Qwen3MoeForCausalLM, Qwen3MoeConfig(
            **COMMON, head_dim=8, num_hidden_layers=3, intermediate_size=48, moe_intermediate_size=16,
            num_experts=8, num_experts_per_tok=3, norm_topk_prob=True, mlp_only_layers=[0])),
        # Qwen2-MoE: q/k/v bias, shared expert with its sigmoid gate, top-2 of 6 not renormalized,
        # MoE on every second layer (decoder_sparse_step 2: layers 1 and 3).
        "qwen2_moe": (Qwen2MoeForCausalLM, Qwen2MoeConfig(
            **COMMON, num_hidden_layers=4, intermediate_size=48, moe_intermediate_size=16,
            shared_expert_intermediate_size=24, num_experts=6, num_experts_per_tok=2, norm_topk_prob=False,
            decoder_sparse_step=2)),
        # Mixtral: top-2 of 4 (softmax over the selected logits).
        "mixtral": (MixtralForCausalLM, MixtralConfig(
            **COMMON, num_hidden_layers=2, intermediate_size=16, num_local_experts=4, num_experts_per_tok=2)),
    }


def randomize(model: torch.nn.Module) -> None:
    torch.manual_seed(11)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.uniform_(0.8, 1.2)
            elif name.endswith("mlp.gate.weight"):
                p.normal_(0, 0.6)
            else:
                p.normal_(0, 0.12)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(3)
    ids = torch.randint(3, 64, (2, 12), dtype=torch.long)
    for case, (cls, cfg) in cases().items():
        d = os.path.join(args.out, case)
        cfg._experts_implementation = "eager"  # the per-expert loop of the modeling file
        model = cls(cfg)
        randomize(model)
        model = model.to(torch.bfloat16).eval()
        model.save_pretrained(os.path.join(d, "per_expert"))
        fused = os.path.join(d, "fused")
        os.makedirs(fused, exist_ok=True)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(state, os.path.join(fused, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(d, "per_expert", "config.json")) as f:
            config = json.load(f)
        with open(os.path.join(fused, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        back = cls.from_pretrained(os.path.join(d, "per_expert"), dtype=torch.float32, experts_implementation="eager")
        with torch.no_grad():
            logits = back.eval()(ids).logits.reshape(-1, cfg.vocab_size)
        save_file({"ids": ids.to(torch.int32), "logits": logits.float()}, os.path.join(d, "expected.safetensors"))
        names = sorted(state)
        print(case, len(names), "tensors; fused names:", [n for n in names if "experts" in n and "layers.1." in n][:3])


if __name__ == "__main__":
    main()
