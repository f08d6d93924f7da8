#!/usr/bin/env python3
"""Tiny random Qwen3-Next checkpoints and the logits transformers computes for them, for
tests/test_qwen3_next_model.cpp (model/arch/qwen3_next.cpp: Gated DeltaNet layers beside gated full
attention with q/k norm and partial RoPE, every norm but the gated one applied as 1 + w, the MoE with a
sigmoid-gated shared expert).

Not part of the test suite and not run in CI. Needs a virtual environment outside the repository with
torch and transformers 5 (made with torch 2.x, transformers 5.25, on the CPU). From the repository root:

    /work/venv/bin/python tools/make_qwen3_next_goldens.py --out tests/data/qwen3_next

For each case it writes <out>/<case>/:
  model/         config.json + model.safetensors as `save_pretrained` writes it (bf16; the experts fused as
                 transformers 5 stores them);
  expected.safetensors  ids [B, T] (int32) and the logits [B*T, vocab] transformers computes in float64
                 after loading the bf16 checkpoint in bf16 and converting it (.double()), stored as float32:
                 the fp32 forward's rounding grows with the sequence (the delta rule's state carries every
                 earlier token), so the test compares ours with the exact model, not with another fp32 run;
                 fp32_worst [1]: the largest difference of transformers' own fp32 forward from them.
Cases: "moe" (4 layers: linear, full, linear, full from layer_types; experts in layers 0, 2, 3 and a dense
MLP in layer 1 from mlp_only_layers; 2 value heads per key head; 2 x 12 tokens) and "long" (no experts,
full_attention_interval 3, one value head per key head, 1 x 150 tokens: past transformers' and our
64-token chunks).
"""
from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402


def cases():
    from transformers import Qwen3NextConfig
    common = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  intermediate_size=48, max_position_embeddings=256, rms_norm_eps=1e-6, bos_token_id=1,
                  eos_token_id=2, linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=6,
                  tie_word_embeddings=False)
    return {
        "moe": (Qwen3NextConfig(**common, num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=4,
                                layer_types=["linear_attention", "full_attention"] * 2,
                                rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                 "partial_rotary_factor": 0.5},
                                num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                shared_expert_intermediate_size=24, norm_topk_prob=True, mlp_only_layers=[1]),
                (2, 12)),
        "long": (Qwen3NextConfig(**common, num_hidden_layers=3, linear_num_key_heads=2, linear_num_value_heads=2,
                                 full_attention_interval=3, num_experts=0,
                                 rope_parameters={"rope_type": "default", "rope_theta": 1000.0,
                                                  "partial_rotary_factor": 0.25}),
                 (1, 150)),
    }


def randomize(model: torch.nn.Module) -> None:
    torch.manual_seed(13)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):
                p.normal_(1, 0.2)  # applied as w
            elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.normal_(0, 0.2)  # applied as 1 + w
            elif name.endswith("A_log"):
                p.uniform_(-1, 1.5)
            elif name.endswith("dt_bias"):
                p.normal_(0.5, 0.5)
            elif "embed_tokens" in name:
                p.normal_(0, 0.3)
            else:
                p.normal_(0, 0.15)


def main() -> None:
    from transformers import Qwen3NextForCausalLM
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for case, (cfg, (B, T)) in cases().items():
        torch.manual_seed(3)
        ids = torch.randint(3, 64, (B, T), dtype=torch.long)
        d = os.path.join(args.out, case)
        model = Qwen3NextForCausalLM(cfg)
        randomize(model)
        model = model.to(torch.bfloat16).eval()
        model.save_pretrained(os.path.join(d, "model"))
        back = Qwen3NextForCausalLM.from_pretrained(os.path.join(d, "model"), dtype=torch.bfloat16,
                                                    attn_implementation="eager",
                                                    experts_implementation="eager").double().eval()
        fp32 = Qwen3NextForCausalLM.from_pretrained(os.path.join(d, "model"), dtype=torch.bfloat16,
                                                    attn_implementation="eager").float().eval()
        with torch.no_grad():
            logits = back(ids).logits.reshape(-1, cfg.vocab_size)
            fp32_worst = (fp32(ids).logits.reshape(-1, cfg.vocab_size).double() - logits).abs().max()
        save_file({"ids": ids.to(torch.int32), "logits": logits.float(), "fp32_worst": fp32_worst.reshape(1).float()},
                  os.path.join(d, "expected.safetensors"))
        with open(os.path.join(d, "model", "config.json")) as f:
            c = json.load(f)
        print(case, c.get("layer_types"), c.get("rope_parameters"), float(logits.abs().max()),
              sorted(k for k in back.state_dict() if "layers.0." in k or "layers.1.self" in k))


if __name__ == "__main__":
    main()
