#!/usr/bin/env python3
"""Tiny random Qwen3.5 checkpoints and the logits transformers computes for them, for
tests/test_qwen3_5_model.cpp (model/arch/qwen3_5.cpp: Qwen3-Next's hybrid layers with the linear layers'
projections split, the dense and the MoE families, and the language model inside the multimodal class).

Not part of the test suite and not run in CI. Needs a virtual environment outside the repository with
torch and transformers 5 (made with torch 2.x, transformers 5.25, on the CPU). From the repository root:

    /work/venv/bin/python tools/make_qwen3_5_goldens.py --out tests/data/qwen3_5

For each case it writes <out>/<case>/:
  model/         config.json + model.safetensors as `save_pretrained` writes it (bf16);
  expected.safetensors  ids [B, T] (int32), the logits [B*T, vocab] transformers computes in float64
                 after loading the bf16 checkpoint (.double()), stored as float32, and fp32_worst [1]: the
                 largest difference of transformers' own fp32 forward from them.
Cases: "dense" (Qwen3_5ForCausalLM: linear, full, linear, full; 2 value heads per key head; 2 x 12
tokens, mRoPE sections in rope_parameters), "moe" (Qwen3_5MoeForCausalLM: 4 experts, top-2, the gated
shared expert; 70 tokens), "multimodal" (Qwen3_5MoeForConditionalGeneration: the moe case's language
model beside a tiny vision tower, stored as save_pretrained writes it: model.language_model.*,
model.visual.*, lm_head.*; the text logits of the moe case's ids, no image).
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import sys  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_qwen3_next_goldens  # noqa: E402

COMMON = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
              max_position_embeddings=256, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
              linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=6, linear_num_key_heads=2,
              linear_num_value_heads=4, tie_word_embeddings=False,
              layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
              num_hidden_layers=4,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                               "mrope_section": [1, 1, 0], "mrope_interleaved": True})


def randomize(model: torch.nn.Module) -> None:
    """make_qwen3_next_goldens.py's draw, then the routers wider (top-2 margins above float noise)."""
    make_qwen3_next_goldens.randomize(model)
    torch.manual_seed(14)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                p.normal_(0, 0.5)


def logits_of(cls, d, ids, vocab):
    exact = cls.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager",
                                experts_implementation="eager").double().eval()
    fp32 = cls.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager").float().eval()
    with torch.no_grad():
        logits = exact(input_ids=ids).logits.reshape(-1, vocab)
        worst = (fp32(input_ids=ids).logits.reshape(-1, vocab).double() - logits).abs().max()
    return logits, worst


def save_case(out, case, model, cls, ids, vocab):
    d = os.path.join(out, case)
    model.to(torch.bfloat16).eval().save_pretrained(os.path.join(d, "model"))
    logits, worst = logits_of(cls, os.path.join(d, "model"), ids, vocab)
    save_file({"ids": ids.to(torch.int32), "logits": logits.float(), "fp32_worst": worst.reshape(1).float()},
              os.path.join(d, "expected.safetensors"))
    print(case, float(logits.abs().max()), float(worst))
    return logits


def main() -> None:
    from transformers import (Qwen3_5ForCausalLM, Qwen3_5MoeConfig, Qwen3_5MoeForCausalLM,
                              Qwen3_5MoeForConditionalGeneration, Qwen3_5MoeTextConfig, Qwen3_5TextConfig)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(3)
    ids12 = torch.randint(3, 64, (2, 12), dtype=torch.long)
    ids70 = torch.randint(3, 64, (1, 70), dtype=torch.long)
    dense = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**COMMON, intermediate_size=48))
    randomize(dense)
    save_case(args.out, "dense", dense, Qwen3_5ForCausalLM, ids12, 64)
    text = Qwen3_5MoeTextConfig(**COMMON, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                shared_expert_intermediate_size=24)
    moe = Qwen3_5MoeForCausalLM(text)
    randomize(moe)
    want = save_case(args.out, "moe", moe, Qwen3_5MoeForCausalLM, ids70, 64)
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4, spatial_merge_size=2,
                  temporal_patch_size=2, out_hidden_size=32, num_position_embeddings=16)
    mm = Qwen3_5MoeForConditionalGeneration(Qwen3_5MoeConfig(text_config=text.to_dict(), vision_config=vision))
    torch.manual_seed(17)
    with torch.no_grad():
        for p in mm.parameters():
            p.normal_(0, 0.2)
    mm.model.language_model.load_state_dict(moe.model.state_dict())
    mm.lm_head.load_state_dict(moe.lm_head.state_dict())
    got = save_case(args.out, "multimodal", mm, Qwen3_5MoeForConditionalGeneration, ids70, 64)
    assert torch.equal(got, want), "the multimodal text logits differ from the text model's"


if __name__ == "__main__":
    main()
