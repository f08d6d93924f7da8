#!/usr/bin/env python3
"""Loads an autoround.cpp output with Hugging Face transformers on the CPU and compares its logits
with ours (`autoround logits`). Not part of the test suite; needs torch + transformers (+ auto-round
or gptqmodel for packed formats) in a virtual environment outside the repository:

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers auto-round
    /tmp/venv/bin/python tools/compat_transformers.py --autoround build/src/cli/autoround --model OUT_DIR

Two checks:
  1. dense: the packed tensors are dequantized here (independently of the C++ loader, from the
     GPTQ layout described in autoround-spec.md section 8) into a plain LlamaForCausalLM, whose
     logits must match ours;
  2. native: AutoModelForCausalLM.from_pretrained(OUT_DIR) through transformers' own quantizer
     integration (auto-round / gptq), when the installed packages support it on the CPU.
"""
import argparse, json, os, subprocess, sys, tempfile

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM


def unpack_stream(words, n, bits):
    """Fields t = 0..n-1 of `bits` bits from little-endian 32-bit word streams along axis 0."""
    w = words.view(np.uint32).astype(np.uint64)
    t = np.arange(n)
    bit = bits * t
    lo, sh = bit // 32, (bit % 32).astype(np.uint64)
    hi = np.minimum(lo + 1, w.shape[0] - 1)
    v = (w[lo] >> sh[:, None]) | (w[hi] << (np.uint64(32) - sh[:, None]))
    return (v & np.uint64((1 << bits) - 1)).astype(np.int64)


def unpack_gptq(qweight, qzeros, scales, bits, group, zero_minus_one):
    in_f = qweight.shape[0] * 32 // bits
    out_f = qweight.shape[1]
    codes = unpack_stream(qweight, in_f, bits)                                    # [in, out]
    zeros = unpack_stream(np.ascontiguousarray(qzeros.T), out_f, bits).T         # [groups, out]
    zeros = zeros.astype(np.float32) + (1.0 if zero_minus_one else 0.0)
    g = np.arange(in_f) // group
    w = scales.astype(np.float32)[g, :] * (codes.astype(np.float32) - zeros[g, :])
    return w.T.copy()  # [out, in]


AWQ_NIBBLE = [0, 4, 1, 5, 2, 6, 3, 7]  # output column j of each group of 8 sits in this nibble


def unpack_awq_rows(packed, out_f):
    w = packed.view(np.uint32)
    cols = np.arange(out_f)
    shift = (4 * np.array(AWQ_NIBBLE)[cols % 8]).astype(np.uint32)
    return ((w[:, cols // 8] >> shift[None, :]) & 0xF).astype(np.float32)


def unpack_awq(qweight, qzeros, scales, group):
    out_f = scales.shape[1]
    codes = unpack_awq_rows(qweight, out_f)      # [in, out]
    zeros = unpack_awq_rows(qzeros, out_f)       # [groups, out]
    g = np.arange(codes.shape[0]) // group
    return (scales.astype(np.float32)[g, :] * (codes - zeros[g, :])).T.copy()


def load_state(model_dir):
    files = [f for f in os.listdir(model_dir) if f.endswith(".safetensors")]
    state = {}
    for f in files:  # via torch: numpy has no bfloat16
        for k, v in load_file(os.path.join(model_dir, f)).items():
            state[k] = (v.float() if v.is_floating_point() else v).numpy()
    return state


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--autoround", required=True, help="path of the autoround binary")
    ap.add_argument("--model", required=True, help="quantized output directory")
    ap.add_argument("--text", default="Once upon a time, there was a little girl named Lily. She loved to play.")
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    q = cfg.get("quantization_config", {})
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.bin")
        subprocess.run([args.autoround, "logits", "--model", args.model, "--text", args.text, "--out", out], check=True)
        ids = [int(x) for x in open(out + ".ids").read().split()]
        ours = np.fromfile(out, dtype=np.float32).reshape(len(ids), cfg["vocab_size"])
    state = load_state(args.model)
    dense = {}
    bits, group = q.get("bits", 16), q.get("group_size", -1)
    zm1 = q.get("packing_format", "auto_gptq") in ("auto_round:auto_gptq", "auto_gptq") or q.get("quant_method") == "gptq"
    awq = q.get("packing_format") == "auto_round:auto_awq" or q.get("quant_method") == "awq"
    for k, v in state.items():
        if k.endswith(".qweight") and awq:
            p = k[: -len(".qweight")]
            dense[p + ".weight"] = unpack_awq(v, state[p + ".qzeros"], state[p + ".scales"],
                                              group if group > 0 else v.shape[0])
        elif k.endswith(".qweight"):
            p = k[: -len(".qweight")]
            in_f = v.shape[0] * 32 // bits
            dense[p + ".weight"] = unpack_gptq(v, state[p + ".qzeros"], state[p + ".scales"], bits,
                                               group if group > 0 else in_f, zm1)
        elif not k.endswith((".qzeros", ".scales", ".g_idx")):
            dense[k] = v.astype(np.float32)
    lcfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
    model = LlamaForCausalLM(LlamaConfig(**lcfg)).eval()
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in dense.items()}, strict=False)
    missing = [m for m in missing if not (cfg.get("tie_word_embeddings") and m == "lm_head.weight")]
    if missing or unexpected:
        sys.exit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    if cfg.get("tie_word_embeddings"):
        model.tie_weights()
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].float().numpy()
    d = np.abs(ref - ours).max()
    print(f"dense check: max |logit diff| = {d:.3e} (max |logit| {np.abs(ref).max():.3f})")
    ok = d <= 1e-3 * max(1.0, np.abs(ref).max())
    try:
        native = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
        with torch.no_grad():
            nat = native(torch.tensor([ids])).logits[0].float().numpy()
        dn = np.abs(nat - ours).max()
        print(f"native transformers load ({type(native).__name__}): max |logit diff| = {dn:.3e}")
        ok = ok and dn <= 2e-2 * max(1.0, np.abs(nat).max())
    except Exception as e:  # the integration may be missing for this format on CPU
        print(f"native transformers load not available: {type(e).__name__}: {e}")
    print("OK" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
