#!/usr/bin/env python3
"""AutoRound's own FP8_STATIC RTN outputs of a mixture-of-experts model, for the test
PipelineFp8Static.MoeRtnMatchesAutoRound: our `--scheme FP8_STATIC --iters 0` run on the same model and
calibration must write the same expert weights and scales, each expert's input scale from the tokens
routed to it, and for the experts no token reached AutoRound's fill (the largest input scale of the
same projection over the layer's calibrated experts). The router stays 16-bit with AutoRound's
extra_config entry.

Not part of the test suite and not run in CI. Needs the venv outside the repository (made with torch
2.15.0, transformers 5.24.0, compressed-tensors 0.20.1, auto-round 0.16.1, on the CPU). From the
repository root:

    /work/arvenv/bin/python tools/make_fp8_static_moe_goldens.py --out tests/data/fp8_static_moe

Writes tests/data/fp8_static_moe/source/ (config.json, model.safetensors: a tiny random Qwen3-MoE,
vocab 512 (the tokenizer's), bf16, layer 0 dense (mlp_only_layers), layer 1 with 8 experts of 32,
top-2) and tests/data/fp8_static_moe/<format>/ for llm_compressor and auto_round: config.json and the
Linears' tensors. Layer 1's router is rank one with expert coefficients (3, 2, 0, 0, 0, 0, -2, -3):
every token picks experts {0, 1} or {6, 7}, so experts 2-5 receive no token. The calibration is
tests/data/fp8_static/calib.jsonl's documents, read as make_fp8_static_goldens.py reads them.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from make_fp8_static_goldens import DOCS, SEQLEN, quantize  # noqa: E402
from make_float_rtn_goldens import keep_linears  # noqa: E402

ROUTER_COEF = [3.0, 2.0, 0.0, 0.0, 0.0, 0.0, -2.0, -3.0]


def make_model(d: str, tok_src: str) -> None:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(vocab_size=512, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         num_hidden_layers=2, intermediate_size=96, moe_intermediate_size=32, num_experts=8,
                         num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[0],
                         max_position_embeddings=128, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(7)
    m = Qwen3MoeForCausalLM(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.8, 1.2)
            else:
                p.normal_(0, 0.05)
        u = torch.randn(cfg.hidden_size)
        m.model.layers[1].mlp.gate.weight.copy_(torch.tensor(ROUTER_COEF)[:, None] * u[None, :])
    m.to(torch.bfloat16).save_pretrained(d)
    for f in glob.glob(os.path.join(tok_src, "*")):
        shutil.copy(f, d)


def write_goldens(make_model, description: str) -> dict:
    """The command line (--out, --tokenizer), then `make_model(dir, tokenizer)`'s model as <out>/source and
    AutoRound's FP8_STATIC RTN outputs of it on the calibration documents as <out>/<format>; returns
    each format's kept tensors."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default="tests/data/autoround_golden/tokenizer")
    args = ap.parse_args()
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    dataset = [torch.tensor([tok(doc)["input_ids"][:SEQLEN]], dtype=torch.long) for doc in DOCS]
    kept = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "model_fp")
        make_model(src, args.tokenizer)
        dst = os.path.join(args.out, "source")
        shutil.rmtree(dst, ignore_errors=True)
        os.makedirs(dst)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(src, f), dst)
        for fmt in ("llm_compressor", "auto_round"):
            d = quantize(src, dataset, fmt, os.path.join(tmp, fmt))
            kept[fmt] = keep_linears(d, os.path.join(args.out, fmt))
    return kept


def main() -> None:
    for fmt, keep in write_goldens(make_model, __doc__.splitlines()[0]).items():
        scales = {k: v.float().item() for k, v in keep.items() if "layers.1.mlp.experts" in k and "input_scale" in k}
        print(fmt, len(keep), "tensors; layer 1 down_proj input scales:",
              [f"{scales[f'model.layers.1.mlp.experts.{e}.down_proj.input_scale']:.6g}" for e in range(8)])


if __name__ == "__main__":
    main()
