#!/usr/bin/env python3
"""Tiny random DeepSeek-V3, DeepSeek-V3.2 and GLM-4.5 checkpoints and the logits transformers computes for
them, for tests/test_deepseek_model.cpp and tests/test_glm_model.cpp (model/arch/deepseek_v3.cpp,
deepseek_v32.cpp, glm4_moe.cpp, model/attention_mla.h, model/moe_router.h).

Not part of the test suite and not run in CI. Needs a virtual environment outside the repository with
torch and transformers 5 (made with torch 2.x, transformers 5.25, on the CPU). From the repository root:

    /work/venv/bin/python tools/make_sigmoid_moe_goldens.py --out tests/data

For each case below it writes tests/data/<family>/<case>/:
  model/     config.json + model.safetensors as `save_pretrained` writes it (bf16);
  expected.safetensors  ids [B, T] (int32) and the logits [B*T, vocab] transformers computes in float32
             from the bf16 weights, read back with from_pretrained.
The router and its score-correction bias are drawn wide so that no token sits near a routing tie.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import sys  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_moe_goldens as moe_goldens  # noqa: E402

COMMON = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=4,
              max_position_embeddings=64, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
              rms_norm_eps=1e-6, intermediate_size=48, moe_intermediate_size=16, kv_lora_rank=16,
              qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, num_mtp_layers=0)


def cases():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, Glm4MoeConfig, Glm4MoeForCausalLM
    glm = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
               max_position_embeddings=64, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
               rms_norm_eps=1e-5, intermediate_size=48, moe_intermediate_size=16, num_mtp_layers=0)
    ds = {
        # DeepSeek-V3 / Kimi K2 shape: q_lora, interleaved YaRN RoPE (mscale_all_dim in the softmax scale),
        # layer 0 dense, then 8 experts in 4 groups (2 groups per token, top-2, renormalized, x2.5) and one
        # ungated shared expert.
        "deepseek_v3": DeepseekV3Config(
            **COMMON, num_hidden_layers=3, q_lora_rank=24, rope_interleave=True, n_routed_experts=8,
            num_experts_per_tok=2, n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
            n_shared_experts=1, first_k_dense_replace=1,
            rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                 original_max_position_embeddings=16, beta_fast=32, beta_slow=1, mscale=1.0,
                                 mscale_all_dim=1.0)),
        # DeepSeek-V2-Lite's attention: q_proj (no q_lora), rotate_half pairs, plain RoPE; routing without
        # groups or renormalization, two shared experts.
        "no_q_lora": DeepseekV3Config(
            **COMMON, num_hidden_layers=2, q_lora_rank=None, rope_interleave=False, n_routed_experts=6,
            num_experts_per_tok=3, n_group=1, topk_group=1, routed_scaling_factor=1.5, norm_topk_prob=False,
            n_shared_experts=2, first_k_dense_replace=0,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
    }
    gl = {
        # GLM-4.5-Air shape: q/k/v biases, partial RoPE (half of each head), layer 0 dense, 8 experts top-2
        # renormalized x1.5 in one group, one shared expert.
        "glm45": Glm4MoeConfig(
            **glm, num_hidden_layers=3, attention_bias=True, use_qk_norm=False, n_routed_experts=8,
            num_experts_per_tok=2, n_group=1, topk_group=1, routed_scaling_factor=1.5, norm_topk_prob=True,
            n_shared_experts=1, first_k_dense_replace=1,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5)),
        # q/k norm on, grouped routing (2 of 4 groups), a quarter of each head rotated.
        "glm_qk_norm": Glm4MoeConfig(
            **glm, num_hidden_layers=2, attention_bias=True, use_qk_norm=True, n_routed_experts=8,
            num_experts_per_tok=3, n_group=4, topk_group=2, routed_scaling_factor=2.0, norm_topk_prob=False,
            n_shared_experts=1, first_k_dense_replace=0,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25)),
    }
    from transformers import DeepseekV32Config, DeepseekV32ForCausalLM
    v32 = {k: v for k, v in COMMON.items() if k != "num_mtp_layers"}
    # DeepSeek-V3.2: V3's model plus the sparse-attention indexer; index_topk 16 >= the 12 tokens of the
    # goldens, so its indexer selects every token and the attention is dense.
    dsa = {"deepseek_v32": DeepseekV32Config(
        **v32, num_hidden_layers=3, q_lora_rank=24, n_routed_experts=8, num_experts_per_tok=2, n_group=4,
        topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True, n_shared_experts=1, first_k_dense_replace=1,
        index_n_heads=2, index_head_dim=8, index_topk=16,
        rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=16,
                             beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0))}
    return [("deepseek_v3", k, DeepseekV3ForCausalLM, v) for k, v in ds.items()] + \
           [("deepseek_v32", k, DeepseekV32ForCausalLM, v) for k, v in dsa.items()] + \
           [("glm4_moe", k, Glm4MoeForCausalLM, v) for k, v in gl.items()]


def randomize(model: torch.nn.Module) -> None:
    """make_moe_goldens.py's draw, plus the router's score-correction bias (a buffer)."""
    moe_goldens.randomize(model)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0, 0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(3)
    ids = torch.randint(3, 64, (2, 12), dtype=torch.long)
    for family, case, cls, cfg in cases():
        torch.manual_seed(3)
        d = os.path.join(args.out, family, case)
        cfg._experts_implementation = "eager"
        model = cls(cfg)
        randomize(model)
        model = model.to(torch.bfloat16).eval()
        model.save_pretrained(os.path.join(d, "model"))
        back = cls.from_pretrained(os.path.join(d, "model"), dtype=torch.float32, experts_implementation="eager")
        with torch.no_grad():
            logits = back.eval()(ids).logits.reshape(-1, cfg.vocab_size)
        save_file({"ids": ids.to(torch.int32), "logits": logits.float()}, os.path.join(d, "expected.safetensors"))
        print(case, sorted(k for k in back.state_dict() if "layers.1." in k)[:12])


if __name__ == "__main__":
    main()
