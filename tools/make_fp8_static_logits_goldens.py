#!/usr/bin/env python3
"""The logits compressed-tensors' own forward computes for FP8_STATIC (W8A8) checkpoints, for the test
Fp8StaticReference.EvalMatchesCompressedTensorsForward: `eval` / `logits` must compute the same W8A8
forward as transformers does in an fp32 model.

Not part of the test suite and not run in CI. Needs the venv outside the repository (made with torch
2.15.0, transformers 5.25.0, compressed-tensors 0.20.1, on the CPU) and our CLI built. From the
repository root:

    /work/venv/bin/python tools/make_fp8_static_logits_goldens.py --autoround build/src/cli/autoround \\
        --out tests/data/fp8_static_logits

Two checkpoints of the 2-layer source model of tests/data/fp8_static (make_fp8_static_goldens.py):
  ours       our `--scheme FP8_STATIC --iters 0 --disable_opt_rtn --quant_lm_head --amp false --format
             llm_compressor` run on its calibration documents (F32 scales, lm_head quantized with its
             own input scale); written to <out>/ours/: config.json and the Linears' and lm_head's
             tensors (the rest is the source's).
  autoround  AutoRound 0.16.1's llm_compressor output already kept in tests/data/fp8_static/
             llm_compressor (BF16 scales; its lm_head is stored dense, and since its config's `ignore`
             is empty the model is read here with "lm_head" ignored, as our reader reads a dense Linear).
Each is assembled into a whole model (the source's other tensors), loaded by transformers' default
compressed-tensors path (`dequantize=False`: compressed-tensors' forward, which decompresses the
weights to fp32 products e4m3(w) * weight_scale and feeds each quantized Linear
e4m3(clamp(x / input_scale, -448, 448)) * input_scale) at dtype float32, and run on IDS. Writes
<out>/logits.safetensors: "ids" (I32 [T]) and "ours" / "autoround" (F32 [T, vocab]). IDS are spread
over the vocabulary, not calibration text, so some Linear inputs pass 448 * input_scale and are clamped
(counted here).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

DATA = "tests/data/fp8_static"
TOKENIZER = "tests/data/autoround_golden/tokenizer"
IDS = [1] + [(i * 211 + 17) % 509 + 3 for i in range(15)]


def run_ours(autoround: str, tmp: str) -> str:
    src = os.path.join(tmp, "src")
    shutil.copytree(os.path.join(DATA, "source"), src)
    for f in os.listdir(TOKENIZER):
        shutil.copy(os.path.join(TOKENIZER, f), src)
    out = os.path.join(tmp, "ours_out")
    subprocess.run([autoround, "--model", src, "--scheme", "FP8_STATIC", "--iters", "0", "--disable_opt_rtn",
                    "--quant_lm_head", "--amp", "false", "--nsamples", "4", "--seqlen", "32", "--dataset",
                    os.path.join(DATA, "calib.jsonl"), "--format", "llm_compressor", "--output_dir", out],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def keep_quantized(src: str, dst: str) -> None:
    """config.json and the quantized Linears' tensors (every Linear and lm_head) of src into dst."""
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    shutil.copy(os.path.join(src, "config.json"), dst)
    with safe_open(os.path.join(src, "model.safetensors"), "pt") as f:
        keep = {k: f.get_tensor(k) for k in f.keys() if "_proj." in k or k.startswith("lm_head.")}
    save_file(keep, os.path.join(dst, "model.safetensors"))


def assemble(quantized: str, dst: str, ignore_lm_head: bool) -> None:
    """A whole model: the source's tensors with those of `quantized` in place of its Linears'."""
    os.makedirs(dst)
    cfg = json.load(open(os.path.join(DATA, "source", "config.json")))
    qc = json.load(open(os.path.join(quantized, "config.json")))["quantization_config"]
    if ignore_lm_head:
        qc["ignore"] = ["lm_head"]
    cfg["quantization_config"] = qc
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
    with safe_open(os.path.join(quantized, "model.safetensors"), "pt") as f:
        q = {k: f.get_tensor(k) for k in f.keys()}
    replaced = {k.rsplit(".", 1)[0] for k in q}
    with safe_open(os.path.join(DATA, "source", "model.safetensors"), "pt") as f:
        t = {k: f.get_tensor(k) for k in f.keys() if k.rsplit(".", 1)[0] not in replaced}
    t.update(q)
    save_file(t, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})


def reference_logits(d: str) -> torch.Tensor:
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)  # the default: dequantize=False
    clamped = {}
    for name, mod in m.named_modules():
        if hasattr(mod, "input_scale"):
            def hook(mod, inp, name=name):
                clamped[name] = int((inp[0].abs() > 448 * mod.input_scale.float()).sum())
            mod.register_forward_pre_hook(hook)
    with torch.no_grad():
        z = m(torch.tensor([IDS])).logits[0].float().contiguous()
    print(f"{d}: {len(clamped)} quantized Linears; clamped inputs {sum(clamped.values())} "
          f"({', '.join(f'{k}: {v}' for k, v in clamped.items() if v)})")
    assert torch.isfinite(z).all()
    return z


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--autoround", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        keep_quantized(run_ours(os.path.abspath(args.autoround), tmp), os.path.join(args.out, "ours"))
        res = {"ids": torch.tensor(IDS, dtype=torch.int32)}
        for name, q, ignore in (("ours", os.path.join(args.out, "ours"), False),
                                ("autoround", os.path.join(DATA, "llm_compressor"), True)):
            d = os.path.join(tmp, "model_" + name)
            assemble(q, d, ignore)
            res[name] = reference_logits(d)
        save_file(res, os.path.join(args.out, "logits.safetensors"))


if __name__ == "__main__":
    main()
