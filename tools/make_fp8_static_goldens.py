#!/usr/bin/env python3
"""AutoRound's own FP8_STATIC (W8A8, static per-tensor activation scale) RTN outputs, for the test
PipelineFp.Fp8StaticRtnMatchesAutoRound: our `--scheme FP8_STATIC --iters 0` run on the same model and
the same calibration tokens must write the same weights and scales, and input scales equal to
AutoRound's (the maximum |input| of each Linear over the calibration tokens, / 448).

Not part of the test suite and not run in CI. Needs the venv outside the repository (made with torch
2.15.0, transformers 5.24.0, compressed-tensors 0.20.1, auto-round 0.16.1, on the CPU). From the
repository root:

    /work/arvenv/bin/python tools/make_fp8_static_goldens.py --out tests/data/fp8_static

Writes tests/data/fp8_static/source/ (config.json, model.safetensors: a tiny random Llama as in
make_float_ckpt_goldens.py, vocab 512 (the tokenizer's), 2 layers, bf16), calib.jsonl (four short
documents written here, each over 32 tokens) and tests/data/fp8_static/<format>/ for llm_compressor
and auto_round: config.json and model.safetensors with the Linears' tensors only. The calibration is
the documents' first 32 tokens as transformers' tokenizer gives them (with BOS), which is what our
`--dataset calib.jsonl --seqlen 32` reads. It also prints, per Linear, the |input| maximum over the
FP chain (the unquantized model's forward) next to AutoRound's input_scale * 448: AutoRound's RTN
runs without the quantized-input chain (its config says enable_quanted_input: false), so they agree.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from make_float_ckpt_goldens import make_model  # noqa: E402
from make_float_rtn_goldens import keep_linears  # noqa: E402

SEQLEN = 32
DOCS = [
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, counting the steps aloud "
    "as his father had taught him, and lit the great lamp that swept its beam across the dark water "
    "where the fishing boats came home.",
    "In the spring the river rose over its banks and the children of the village waited on the hill "
    "with baskets of bread, watching the brown water carry branches, fence posts and once a small "
    "wooden boat with nobody in it.",
    "She opened the old notebook on the kitchen table and read her grandmother's recipes one by one: "
    "apple cake with cinnamon, bean soup for cold nights, and a bread that needed three days of "
    "patience before it went into the oven.",
    "At the edge of the forest stood a mill whose wheel had not turned for forty years, until a "
    "young engineer from the city arrived with a box of tools, a bicycle and a plan that nobody in "
    "town believed would work.",
]


def quantize(src: str, dataset: list, fmt: str, out: str) -> str:
    from auto_round import AutoRound
    # amp off: on a CPU with bf16 dot products AutoRound would keep the model in bf16 and write bf16
    # scales; the goldens are its fp32 chain, as on a CPU without them.
    ar = AutoRound(src, dataset=dataset, scheme="FP8_STATIC", iters=0, nsamples=len(dataset), seqlen=SEQLEN,
                   disable_opt_rtn=True, disable_model_free=True, enable_torch_compile=False, amp=False)
    ar.quantize_and_save(out, format=fmt)
    return os.path.dirname(glob.glob(os.path.join(out, "**", "model.safetensors"), recursive=True)[0])


def fp_chain_maxima(src: str, dataset: list) -> dict:
    """max |input| of every Linear over the calibration tokens, the unquantized model in bf16."""
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.bfloat16)
    seen, hooks = {}, []
    for name, mod in m.named_modules():
        if isinstance(mod, torch.nn.Linear) and "_proj" in name:
            def hook(mod, inp, out, name=name):
                v = inp[0].abs().max().float().item()
                seen[name] = max(seen.get(name, 0.0), v)
            hooks.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        for ids in dataset:
            m(ids)
    return seen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default="tests/data/autoround_golden/tokenizer")
    args = ap.parse_args()
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    dataset = []
    for doc in DOCS:
        ids = tok(doc)["input_ids"]
        assert len(ids) > SEQLEN, f"a document of {len(ids)} tokens"
        dataset.append(torch.tensor([ids[:SEQLEN]], dtype=torch.long))
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "model_fp")
        make_model(src, args.tokenizer, vocab=512, layers=2)
        os.makedirs(args.out, exist_ok=True)
        dst = os.path.join(args.out, "source")
        shutil.rmtree(dst, ignore_errors=True)
        os.makedirs(dst)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(src, f), dst)
        with open(os.path.join(args.out, "calib.jsonl"), "w", encoding="utf-8") as f:
            for doc in DOCS:
                f.write(json.dumps({"text": doc}) + "\n")
        maxima = fp_chain_maxima(src, dataset)
        for fmt in ("llm_compressor", "auto_round"):
            d = quantize(src, dataset, fmt, os.path.join(tmp, fmt))
            keep = keep_linears(d, os.path.join(args.out, fmt))
            for k, v in sorted(keep.items()):
                if k.endswith("input_scale"):
                    name = k[: -len(".input_scale")]
                    print(f"{fmt} {name}: input_scale*448 {v.float().item() * 448:.6g}, "
                          f"FP-chain max {maxima[name]:.6g}")


if __name__ == "__main__":
    main()
