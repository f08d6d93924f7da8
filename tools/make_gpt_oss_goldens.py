#!/usr/bin/env python3
"""Tiny random gpt-oss checkpoints and the logits transformers computes for them, for
tests/test_gpt_oss_model.cpp (model/arch/gpt_oss.cpp: sinks, sliding windows, the biased router, the
experts' biases and clamped SwiGLU, transformers 5's fused expert layout).

Not part of the test suite and not run in CI. Needs a virtual environment outside the repository with
torch and transformers 5 (made with torch 2.x, transformers 5.25, on the CPU). From the repository root:

    /work/venv/bin/python tools/make_gpt_oss_goldens.py --out tests/data/gpt_oss

For each case it writes <out>/<case>/:
  model/       config.json + model.safetensors as `save_pretrained` writes it (bf16; experts fused:
               gate_up_proj [E, C, 2I] interleaved, down_proj [E, I, C], with their biases);
  per_expert/  the same weights one tensor per expert Linear and bias (mlp.experts.<e>.gate_proj.weight,
               .bias, ...), the layout AutoRound writes gpt-oss in;
  expected.safetensors  ids [B, T] (int32) and the logits [B*T, vocab] transformers computes in float32
               from the bf16 weights, read back with from_pretrained.
The sliding window (4 keys) is shorter than the 12-token sequences, the clamp limit is small enough that
gate and up values fall beyond it on both sides, and the sinks are drawn around the logits' size.

The case `mxfp4` is stored as the released checkpoints are: quantization_config {"quant_method": "mxfp4"}
and each layer's experts as gate_up_proj_blocks [E, 2I, C/32, 16] / gate_up_proj_scales [E, 2I, C/32]
(E2M1 codes, low nibble first, E8M0 exponents; rows = gate and up interleaved) and down_proj_blocks /
down_proj_scales [E, C, I/32(, 16)], the codes and exponents drawn at random; its logits are transformers'
with Mxfp4Config(dequantize=True) (exact: every value is a code times a power of two).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402


def cases():
    from transformers import GptOssConfig
    common = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  intermediate_size=16, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
                  bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-5, sliding_window=4, tie_word_embeddings=False)
    return {
        # gpt-oss's own shape: YaRN (factor 4 over 16 positions, truncate false), sliding layers 0 and 2.
        "gpt_oss": GptOssConfig(**common, num_hidden_layers=3, swiglu_limit=0.6,
                                rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=4.0,
                                                     beta_fast=32.0, beta_slow=1.0, truncate=False,
                                                     original_max_position_embeddings=16)),
        # Layer types given explicitly (full, sliding), plain RoPE, no attention biases, the default clamp.
        "layer_types": GptOssConfig(**common, num_hidden_layers=2, attention_bias=False,
                                    layer_types=["full_attention", "sliding_attention"],
                                    rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
    }


def mxfp4_config():
    from transformers import GptOssConfig
    # MXFP4 blocks need C and I in multiples of 32.
    return GptOssConfig(vocab_size=64, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
                        bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-5, sliding_window=4, tie_word_embeddings=False,
                        num_hidden_layers=2, swiglu_limit=1.0,
                        rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=4.0, beta_fast=32.0,
                                             beta_slow=1.0, truncate=False, original_max_position_embeddings=16))


def mxfp4_state(model, cfg) -> dict:
    """The model's state with its experts replaced by random MXFP4 blocks and scales (the release's names)."""
    g = torch.Generator().manual_seed(5)
    out = {}
    E, C, I = cfg.num_local_experts, cfg.hidden_size, cfg.intermediate_size
    for k, v in model.state_dict().items():
        if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
            rows, cols = (2 * I, C) if k.endswith("gate_up_proj") else (C, I)
            out[k + "_blocks"] = torch.randint(0, 256, (E, rows, cols // 32, 16), generator=g, dtype=torch.uint8)
            out[k + "_scales"] = torch.randint(122, 127, (E, rows, cols // 32), generator=g, dtype=torch.uint8)
        else:
            out[k] = v.contiguous()
    return out


def randomize(model: torch.nn.Module) -> None:
    torch.manual_seed(11)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.uniform_(0.8, 1.2)
            elif name.endswith("router.weight"):
                p.normal_(0, 0.6)
            elif name.endswith("sinks"):
                p.normal_(0, 1.0)
            elif "experts" in name:
                p.normal_(0, 0.25)
            else:
                p.normal_(0, 0.12)


def per_expert_state(state: dict, cfg) -> dict:
    """transformers 5's fused gpt-oss experts as one tensor per expert Linear (AutoRound's layout)."""
    out = {}
    for k, v in state.items():
        if not k.split(".")[-1] in ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias") or \
                ".experts." not in k:
            out[k] = v.contiguous()
            continue
        base, what = k.rsplit(".", 1)
        for e in range(cfg.num_local_experts):
            if what == "gate_up_proj":
                out[f"{base}.{e}.gate_proj.weight"] = v[e, :, ::2].T.contiguous()
                out[f"{base}.{e}.up_proj.weight"] = v[e, :, 1::2].T.contiguous()
            elif what == "gate_up_proj_bias":
                out[f"{base}.{e}.gate_proj.bias"] = v[e, ::2].contiguous()
                out[f"{base}.{e}.up_proj.bias"] = v[e, 1::2].contiguous()
            elif what == "down_proj":
                out[f"{base}.{e}.down_proj.weight"] = v[e].T.contiguous()
            else:
                out[f"{base}.{e}.down_proj.bias"] = v[e].contiguous()
    return out


def main() -> None:
    from transformers import GptOssForCausalLM
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(3)
    ids = torch.randint(3, 64, (2, 12), dtype=torch.long)
    for case, cfg in cases().items():
        d = os.path.join(args.out, case)
        cfg._experts_implementation = "eager"
        model = GptOssForCausalLM(cfg)
        randomize(model)
        model = model.to(torch.bfloat16).eval()
        model.save_pretrained(os.path.join(d, "model"))
        per = os.path.join(d, "per_expert")
        os.makedirs(per, exist_ok=True)
        save_file(per_expert_state(model.state_dict(), cfg), os.path.join(per, "model.safetensors"),
                  metadata={"format": "pt"})
        shutil.copy(os.path.join(d, "model", "config.json"), os.path.join(per, "config.json"))
        back = GptOssForCausalLM.from_pretrained(os.path.join(d, "model"), dtype=torch.float32,
                                                 experts_implementation="eager", attn_implementation="eager")
        with torch.no_grad():
            logits = back.eval()(ids).logits.reshape(-1, cfg.vocab_size)
        save_file({"ids": ids.to(torch.int32), "logits": logits.float()}, os.path.join(d, "expected.safetensors"))
        with open(os.path.join(d, "model", "config.json")) as f:
            c = json.load(f)
        print(case, c.get("layer_types"), c.get("rope_parameters"),
              sorted(k for k in back.state_dict() if "layers.1." in k)[:14])
    write_mxfp4_case(os.path.join(args.out, "mxfp4"), ids)


def write_mxfp4_case(d: str, ids: torch.Tensor) -> None:
    from transformers import GptOssForCausalLM, Mxfp4Config
    cfg = mxfp4_config()
    cfg._experts_implementation = "eager"
    model = GptOssForCausalLM(cfg)
    randomize(model)
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(os.path.join(d, "model"))  # config.json and generation_config.json
    os.remove(os.path.join(d, "model", "model.safetensors"))
    save_file(mxfp4_state(model, cfg), os.path.join(d, "model", "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "model", "config.json")) as f:
        c = json.load(f)
    c["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(d, "model", "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    back = GptOssForCausalLM.from_pretrained(os.path.join(d, "model"), dtype=torch.float32,
                                             quantization_config=Mxfp4Config(dequantize=True),
                                             experts_implementation="eager", attn_implementation="eager")
    with torch.no_grad():
        logits = back.eval()(ids).logits.reshape(-1, cfg.vocab_size)
    save_file({"ids": ids.to(torch.int32), "logits": logits.float()}, os.path.join(d, "expected.safetensors"))
    sd = back.state_dict()
    print("mxfp4", sd["model.layers.0.mlp.experts.gate_up_proj"].shape, sd["model.layers.0.mlp.experts.down_proj"].shape,
          sd["model.layers.0.mlp.experts.gate_up_proj"].dtype)


if __name__ == "__main__":
    main()
