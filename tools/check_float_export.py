#!/usr/bin/env python3
"""Do our float-scheme outputs (issue 25) load where compressed-tensors checkpoints load?

Not part of the test suite. Needs the venv outside the repository (torch, transformers,
compressed-tensors, auto-round); measured with torch 2.15.0, transformers 5.25.0,
compressed-tensors 0.20.1. The CLI must already be built. Command (repository root):

    /work/arvenv/bin/python tools/check_float_export.py --autoround build/src/cli/autoround \\
        --work /tmp/float_export

For a random Llama (check_loadability.py's model: hidden 576, intermediate 1536, 2 layers, bf16)
and each scheme (MXFP4, MXFP8, NVFP4, FPW8A16, FP8 per channel; SignRound, --iters 20):
  1. ours: `autoround --format llm_compressor,fake ...`, then `autoround logits` of the
     llm_compressor output (our reader, dequantizing on load);
  2. compressed-tensors: transformers loads the llm_compressor output (quantization_config
     compressed-tensors, decompressed: run_compressed=False) on the CPU in float32 (as our eval
     computes; MX / NVFP4 decompress to bf16 at any dtype, FP8 to the fp32 product e4m3 * scale, as our
     reader does); every quantized Linear's weight is compared with our `fake` output's (fp16 of our
     fp32 QDQ weights), and its logits with ours. FP8_STATIC is W8A8:
     transformers decompresses its weights only, so forward pre-hooks put each quantized Linear's input
     through torch's E4M3 cast at the checkpoint's input_scale (what vLLM's static FP8 kernels compute),
     and the row also says how far the weight-only logits are from that.
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
        d, quantization_config=CompressedTensorsConfig(run_compressed=False), dtype=torch.float32)


def static_activation_hooks(m, d):
    """Each Linear with an input_scale in the checkpoint reads its input through the E4M3 QDQ of that
    scale (torch's own float8 cast): clamp(x / s, +-448) -> float8_e4m3fn -> * s, in float32."""
    import glob

    import torch
    from safetensors.torch import load_file

    hooks = []
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        for k, v in load_file(f).items():
            if not k.endswith(".input_scale"):
                continue
            s = v.float().reshape(())

            def qdq(_mod, args, s=s):
                x = args[0]
                q = torch.clamp(x.float() / s, -448.0, 448.0).to(torch.float8_e4m3fn).float() * s
                return (q.to(x.dtype),) + tuple(args[1:])

            hooks.append(m.get_submodule(k[: -len(".input_scale")]).register_forward_pre_hook(qdq))
    return hooks


def w8a8_report(name, m, hooks, ids, ours, theirs):
    """W8A8 logits of a random model are chaotic: one E4M3 rounding of an activation that flips under an
    fp32 summation-order difference changes that position and, through attention, every later one. So
    the row measures torch's own spread (its W8A8 logits with the quantized weights scaled by 1 + 1e-7 N(0,1),
    three draws), the positions where ours and torch's agree within 1e-3 of max|logit| before the first
    divergence, and the weight-only logits' distance; the tolerance is three times the spread."""
    import numpy as np
    import torch

    scale = max(1.0, float(np.abs(theirs).max()))
    params = [p for n, p in m.named_parameters() if n.endswith("proj.weight")]
    saved = [p.data.clone() for p in params]
    spread, own_lead = 0.0, []
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        for p, w in zip(params, saved):
            p.data.copy_(w * (1 + 1e-7 * torch.randn(w.shape, generator=g)))
        with torch.no_grad():
            other = m(torch.tensor([ids])).logits[0].float().numpy()
        spread = max(spread, float(np.abs(other - theirs).max()) / scale)
        pp = np.abs(other - theirs).max(axis=1) / scale
        own_lead.append(int(np.argmax(pp > 1e-3)) if (pp > 1e-3).any() else len(pp))
    for p, w in zip(params, saved):
        p.data.copy_(w)
    per_pos = np.abs(ours.reshape(theirs.shape) - theirs).max(axis=1) / scale
    lead = int(np.argmax(per_pos > 1e-3)) if (per_pos > 1e-3).any() else len(per_pos)
    for h in hooks:
        h.remove()
    with torch.no_grad():
        w_only = m(torch.tensor([ids])).logits[0].float().numpy()
    print(f"{name:12s} {len(hooks)} Linears with static FP8 inputs; ours equal torch's W8A8 (1e-3) on the first "
          f"{lead} of {len(per_pos)} positions (torch against itself under 1e-7 weight noise: the first {own_lead}); "
          f"torch's own spread under that noise {spread:.2e}; "
          f"weight-only logits are {float(np.abs(w_only - theirs).max()) / scale:.2e} away")
    return 3 * spread


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
        hooks = static_activation_hooks(m, lc)  # FP8_STATIC: W8A8 as a serving engine computes it
        with torch.no_grad():
            theirs = m(torch.tensor([ids])).logits[0].float().numpy()
        tol = 1e-3
        if hooks:
            tol = w8a8_report(name, m, hooks, ids, ours, theirs)
        ldiff = float(np.abs(theirs - ours).max() / max(1.0, np.abs(ours).max()))
        good = worst_fake <= 1e-2 and ldiff <= tol
        ok &= good
        print(f"{name:12s} loads: yes; weights vs our QDQ (fake, fp16): max rel diff {worst_fake:.2e}, "
              f"bf16-equal {exact}/{total} ({100.0 * exact / total:.3f}%); logits vs our eval: "
              f"max |diff| / max|logit| {ldiff:.2e} {'OK' if good else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
