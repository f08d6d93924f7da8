#!/usr/bin/env python3
"""Tiny random Gemma 3 checkpoints and the logits transformers computes for them, for
tests/test_gemma3_model.cpp (model/arch/gemma3.cpp: sandwich norms applied as 1 + w, the GeLU-tanh MLP,
q/k norm, query_pre_attn_scalar, sliding and global layers with their own RoPE, the scaled and tied
embeddings, final logit soft-capping).

Not part of the test suite and not run in CI. Needs a virtual environment outside the repository with
torch and transformers 5 (made with torch 2.x, transformers 5.25, on the CPU). From the repository root:

    /work/venv/bin/python tools/make_gemma3_goldens.py --out tests/data/gemma3

For each case it writes <out>/<case>/:
  model/         config.json + model.safetensors as `save_pretrained` writes it (bf16);
  legacy/        the same weights with the config.json fields of the released checkpoints (transformers
                 4: rope_theta, rope_local_base_freq, rope_scaling, sliding_window_pattern; no layer_types
                 or rope_parameters), which must describe the same model;
  expected.safetensors  ids [B, T] (int32) and the logits [B*T, vocab] transformers computes in float32
                 after loading the bf16 checkpoint in bf16 and converting it (.float()): the embedding
                 scale sqrt(hidden_size) is then the bf16 value, as every bf16 run of the model has it.
And <out>/multimodal/: a Gemma3ForConditionalGeneration whose language model is the gemma3 case's (the
same weights) beside a tiny random SigLIP vision tower and projector:
  model/         as save_pretrained writes it (language_model.model.*, vision_tower.*, ...);
  model_v5/      the same tensors under transformers 5's module names (model.language_model.*,
                 model.vision_tower.*, lm_head.*), which transformers loads to the same model;
  expected.safetensors  the text logits of the ids (no image), equal to those of the gemma3 case's text
                 model without its soft-cap (transformers' Gemma3ForConditionalGeneration applies none).
The window (4 keys) is shorter than the 12-token sequences; the global layers' RoPE is linearly scaled;
query_pre_attn_scalar differs from head_dim; the soft-cap is below the largest logits.
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
    from transformers import Gemma3TextConfig
    common = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  intermediate_size=48, max_position_embeddings=64, bos_token_id=2, eos_token_id=1, pad_token_id=0,
                  rms_norm_eps=1e-6, sliding_window=4, query_pre_attn_scalar=12)
    return {
        # sliding, global, sliding, global (sliding_window_pattern 2); global RoPE linear x2 at theta 1e6.
        "gemma3": Gemma3TextConfig(**common, num_hidden_layers=4, final_logit_softcapping=2.5,
                                   layer_types=["sliding_attention", "full_attention"] * 2,
                                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                    "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                       "rope_theta": 1000000.0}}),
        # Attention biases, no soft-cap, plain RoPE on both kinds (local theta 500), three layers of which
        # the last is global (pattern 3).
        "bias": Gemma3TextConfig(**common, num_hidden_layers=3, attention_bias=True,
                                 layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                                 rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
                                                  "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}}),
    }


def legacy_config(c: dict) -> dict:
    """The config.json of a released Gemma 3 (transformers 4 fields) for the same model."""
    out = {k: v for k, v in c.items() if k not in ("layer_types", "rope_parameters")}
    rp, types = c["rope_parameters"], c["layer_types"]
    out["rope_theta"] = rp["full_attention"]["rope_theta"]
    out["rope_local_base_freq"] = rp["sliding_attention"]["rope_theta"]
    full = {k: v for k, v in rp["full_attention"].items() if k != "rope_theta"}
    out["rope_scaling"] = None if full.get("rope_type", "default") == "default" else full
    out["sliding_window_pattern"] = types.index("full_attention") + 1
    out["hidden_activation"] = "gelu_pytorch_tanh"
    return out


def randomize(model: torch.nn.Module) -> None:
    torch.manual_seed(13)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.normal_(0, 0.2)  # applied as 1 + w
            elif name.endswith("bias"):
                p.normal_(0, 0.1)
            elif "embed_tokens" in name:
                p.normal_(0, 0.3)
            else:
                p.normal_(0, 0.15)


def main() -> None:
    from transformers import Gemma3ForCausalLM
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(3)
    ids = torch.randint(3, 64, (2, 12), dtype=torch.long)
    for case, cfg in cases().items():
        d = os.path.join(args.out, case)
        model = Gemma3ForCausalLM(cfg)
        randomize(model)
        model = model.to(torch.bfloat16).eval()
        model.save_pretrained(os.path.join(d, "model"))
        with open(os.path.join(d, "model", "config.json")) as f:
            c = json.load(f)
        legacy = os.path.join(d, "legacy")
        os.makedirs(legacy, exist_ok=True)
        shutil.copy(os.path.join(d, "model", "model.safetensors"), legacy)
        with open(os.path.join(legacy, "config.json"), "w") as f:
            json.dump(legacy_config(c), f, indent=2)
        back = Gemma3ForCausalLM.from_pretrained(os.path.join(d, "model"), dtype=torch.bfloat16,
                                                 attn_implementation="eager").float().eval()
        again = Gemma3ForCausalLM.from_pretrained(legacy, dtype=torch.bfloat16, attn_implementation="eager").float()
        with torch.no_grad():
            logits = back(ids).logits.reshape(-1, cfg.vocab_size)
            assert torch.equal(logits, again.eval()(ids).logits.reshape(-1, cfg.vocab_size)), "legacy config differs"
        save_file({"ids": ids.to(torch.int32), "logits": logits.float()}, os.path.join(d, "expected.safetensors"))
        print(case, c.get("layer_types"), c.get("rope_parameters"), float(back.model.embed_tokens.embed_scale),
              float(logits.abs().max()), sorted(k for k in back.state_dict() if "layers.1." in k))
    multimodal(args.out, ids)


def v5_name(name: str) -> str:
    """A stored name of the multimodal checkpoint under transformers 5's module names."""
    for old, new in (("language_model.model.", "model.language_model."), ("language_model.lm_head.", "lm_head."),
                     ("vision_tower.", "model.vision_tower."), ("multi_modal_projector.", "model.multi_modal_projector.")):
        if name.startswith(old):
            return new + name[len(old):]
    return name


def multimodal(out: str, ids: torch.Tensor) -> None:
    """The multimodal case: the gemma3 case's language model inside Gemma3ForConditionalGeneration."""
    from safetensors.torch import load_file
    from transformers import Gemma3Config, Gemma3ForCausalLM, Gemma3ForConditionalGeneration
    # transformers' Gemma3ForConditionalGeneration does not soft-cap the logits (Gemma3ForCausalLM and vLLM
    # do; no release sets the field): the language model here has none, as autoround.cpp requires.
    text = Gemma3ForCausalLM.from_pretrained(os.path.join(out, "gemma3", "model"), dtype=torch.bfloat16,
                                             attn_implementation="eager", final_logit_softcapping=None)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14, vision_use_head=False)
    cfg = Gemma3Config(text_config=text.config.to_dict(), vision_config=vision, mm_tokens_per_image=4)
    torch.manual_seed(17)
    mm = Gemma3ForConditionalGeneration(cfg)
    with torch.no_grad():
        for p in mm.parameters():
            p.normal_(0, 0.2)
    mm.model.language_model.load_state_dict(text.model.state_dict())
    mm = mm.to(torch.bfloat16).eval()
    d = os.path.join(out, "multimodal")
    mm.save_pretrained(os.path.join(d, "model"))
    v5 = os.path.join(d, "model_v5")
    os.makedirs(v5, exist_ok=True)
    shutil.copy(os.path.join(d, "model", "config.json"), v5)
    tensors = load_file(os.path.join(d, "model", "model.safetensors"))
    save_file({v5_name(k): v for k, v in tensors.items()}, os.path.join(v5, "model.safetensors"), metadata={"format": "pt"})
    logits = []
    for src in ("model", "model_v5"):
        back = Gemma3ForConditionalGeneration.from_pretrained(os.path.join(d, src), dtype=torch.bfloat16,
                                                              attn_implementation="eager").float().eval()
        with torch.no_grad():
            logits.append(back(input_ids=ids).logits.reshape(-1, cfg.text_config.vocab_size))
    assert torch.equal(logits[0], logits[1]), "the two layouts load differently"
    with torch.no_grad():
        want = text.float().eval()(ids).logits.reshape(-1, cfg.text_config.vocab_size)
    assert torch.equal(logits[0], want), "the multimodal text logits differ from the text model's"
    save_file({"ids": ids.to(torch.int32), "logits": logits[0].float()}, os.path.join(d, "expected.safetensors"))
    print("multimodal", sorted(tensors)[:3], len(tensors), "tensors")


if __name__ == "__main__":
    main()
