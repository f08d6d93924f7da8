#!/usr/bin/env python3
"""AutoRound's own FP8_STATIC RTN outputs of a DeepSeek-V3 model (multi-head latent attention), for the
test PipelineFp8Static.MlaRtnMatchesAutoRound: our `--scheme FP8_STATIC --iters 0` run on the same model
and calibration must write the same weights and weight scales, and each of MLA's five Linears its own
input scale: q_a_proj and kv_a_proj_with_mqa read the attention norm's output, q_b_proj the q_a
layernorm's, kv_b_proj the kv_a layernorm's (the latent), o_proj the attention's output. The router
stays 16-bit with AutoRound's extra_config entry.

Not part of the test suite and not run in CI. Needs the venv outside the repository (torch,
transformers 5.x, compressed-tensors, auto-round 0.16.1, on the CPU). From the repository root:

    /work/venv/bin/python tools/make_fp8_static_mla_goldens.py --out tests/data/fp8_static_mla

Writes tests/data/fp8_static_mla/source/ (config.json, model.safetensors: a tiny random DeepSeek-V3,
vocab 512 (the tokenizer's), bf16, q_lora 32, kv_lora 16, layer 0 dense, layer 1 with 4 experts of
32 in 2 groups, top-2, one shared expert, plain RoPE) and tests/data/fp8_static_mla/<format>/ for
llm_compressor and auto_round: config.json and the Linears' tensors. The calibration is
tests/data/fp8_static/calib.jsonl's documents, read as make_fp8_static_goldens.py reads them.
"""
from __future__ import annotations

import glob
import os
import shutil
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from make_fp8_static_moe_goldens import write_goldens  # noqa: E402


def make_model(d: str, tok_src: str) -> None:
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    cfg = DeepseekV3Config(vocab_size=512, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                           q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
                           v_head_dim=16, num_hidden_layers=2, intermediate_size=96, moe_intermediate_size=32,
                           n_routed_experts=4, num_experts_per_tok=2, n_group=2, topk_group=1,
                           routed_scaling_factor=2.5, norm_topk_prob=True, n_shared_experts=1,
                           first_k_dense_replace=1, rope_interleave=True, num_mtp_layers=0,
                           rope_parameters=dict(rope_type="default", rope_theta=10000.0),
                           max_position_embeddings=128, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(11)
    m = DeepseekV3ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.8, 1.2)
            elif name.endswith("e_score_correction_bias"):
                p.normal_(0, 0.1)
            else:
                p.normal_(0, 0.05)
    m.to(torch.bfloat16).save_pretrained(d)
    for f in glob.glob(os.path.join(tok_src, "*")):
        shutil.copy(f, d)


def main() -> None:
    for fmt, keep in write_goldens(make_model, __doc__.splitlines()[0]).items():
        scales = {k: v.float().item() for k, v in keep.items() if k.endswith("input_scale")}
        print(fmt, len(keep), "tensors;", len(scales), "input scales; layer 0 attention:",
              {k.split(".")[-2]: f"{v:.6g}" for k, v in scales.items() if "layers.0.self_attn" in k})
        assert len(scales) == 2 * 5 + 3 + 3 * (4 + 1), "every Linear but the router has its input scale"


if __name__ == "__main__":
    main()
