#!/usr/bin/env python3
"""Do our float-scheme outputs (issue 25) load where compressed-tensors checkpoints load?

Not part of the test suite. Needs the venv outside the repository (torch, transformers,
compressed-tensors, auto-round); measured with torch 2.15.0, transformers 5.24.0,
compressed-tensors 0.20.1. The CLI must already be built. Command (repository root):

    /work/arvenv/bin/python tools/check_float_export.py --autoround build/src/cli/autoround \\
        --work /tmp/float_export

For a random Llama (check_loadability.py's model: hidden 576, intermediate 1536, 2 layers, bf16)
and each scheme (MXFP4, MXFP8, NVFP4, FPW8A16, FP8 per channel; SignRound, --iters 20):
  1. ours: `autoround --format llm_compressor,fake ...`, then `autoround logits` of the
     llm_compressor output (our reader, dequantizing on load);
  2. compressed-tensors: transformers loads the llm_compressor output (quantization_config
     compressed-tensors, decompressed: run_compressed=False) on the CPU at the model's dtype (bf16, as
     our reader decodes too), then runs it in float32 (as our eval does); every quantized Linear's
     weight is compared with our `fake` output's (fp16 of our fp32 QDQ weights) and with our
     reader's decoding (bf16 of the same product), and its logits with ours.
Prints one row per scheme; exit status 0 when every scheme loads, its weights equal ours within
the storage rounding stated in the row, and its logits (float32) agree within 1e-3 of max |logit|.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_loadability as cl  # noqa: E402  (the model and our CLI helpers)

SCHEMES = [
    ("MXFP4", ["--data_type", "mx_fp", "--bits", "4"]),
    ("MXFP8", ["--data_type", "mx_fp", "--bits", "8"]),
    ("NVFP4", ["--scheme", "NVFP4", "--act_bits", "16"]),
    ("FPW8A16", ["--scheme", "FPW8A16"]),
    ("FP8 channel", ["--data_type", "fp"]),
    ("FP8_STATIC", ["--scheme", "FP8_STATIC"]),  # W8A8: input_scale per Linear
]


def ct_model(d):
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils.quantization_config import CompressedTensorsConfig

    return AutoModelForCausalLM.from_pretrained(
        d, quantization_config=CompressedTensorsConfig(run_compressed=False), dtype=torch.bfloat16).float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--autoround", required=True)
    ap.add_argument("--work", default="/tmp/float_export")
    ap.add_argument("--iters", default="20")
    args = ap.parse_args()
    import numpy as np
    import torch
    from safetensors.torch import load_file

    os.makedirs(args.work, exist_ok=True)
    model = os.path.join(args.work, "model")
    if not os.path.exists(os.path.join(model, "config.json")):
        cl.make_model(model)
    ok = True
    for name, flags in SCHEMES:
        out = os.path.join(args.work, name.replace(" ", "_"))
        cmd = [args.autoround, "--model", model, "--output_dir", out, "--format", "llm_compressor,fake",
               "--iters", args.iters, "--nsamples", "8", "--seqlen", "128", "--overwrite"] + flags
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            print(f"{name}: our CLI failed: {(r.stdout + r.stderr).strip().splitlines()[-1]}")
            ok = False
            continue
        lc, fake = os.path.join(out, "llm-compressor"), os.path.join(out, "fake")
        logits_path = os.path.join(out, "ours_logits.bin")
        for f in (logits_path, logits_path + ".ids"):
            if os.path.exists(f):
                os.remove(f)
        ids, ours, err = cl.our_logits(args.autoround, lc, cl.DEFAULT_TEXT, logits_path)
        if err:
            print(f"{name}: our reader failed: {err}")
            ok = False
            continue
        try:
            m = ct_model(lc)
        except Exception as e:  # noqa: BLE001 (report and go on to the next scheme)
            print(f"{name}: transformers/compressed-tensors failed to load: {type(e).__name__}: {e}")
            ok = False
            continue
        fake_w = load_file(os.path.join(fake, "model.safetensors"))
        worst_fake = 0.0
        exact = total = 0
        for li in range(2):
            for lin in cl.LINEARS:
                key = f"model.layers.{li}.{lin}.weight"
                mod = m.get_submodule(f"model.layers.{li}.{lin}")
                w = mod.weight.detach().float()
                ref = fake_w[key].float()
                d = (w - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
                worst_fake = max(worst_fake, d)
                exact += int((w.to(torch.bfloat16) == ref.to(torch.bfloat16)).sum())
                total += w.numel()
        with torch.no_grad():
            theirs = m(torch.tensor([ids])).logits[0].float().numpy()
        ldiff = float(np.abs(theirs - ours).max() / max(1.0, np.abs(ours).max()))
        good = worst_fake <= 1e-2 and ldiff <= 1e-3
        ok &= good
        print(f"{name:12s} loads: yes; weights vs our QDQ (fake, fp16): max rel diff {worst_fake:.2e}, "
              f"bf16-equal {exact}/{total} ({100.0 * exact / total:.3f}%); logits vs our eval: "
              f"max |diff| / max|logit| {ldiff:.2e} {'OK' if good else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
