#!/usr/bin/env python3
"""Float-scheme checkpoints written by AutoRound itself, and the weights transformers reads from them,
for tests/test_float_ckpt.cpp (model/dequant_float.cpp reads them).

Not part of the test suite and not run in CI. Needs a virtual environment outside the repository with
torch, transformers 5, compressed-tensors and auto-round 0.16.1 (made with torch 2.15.0, transformers
5.24.0, compressed-tensors 0.20.1, auto-round 0.16.1, on the CPU). From the repository root:

    /work/arvenv/bin/python tools/make_float_ckpt_goldens.py --out tests/data/float_ckpt

It writes tests/data/float_ckpt/<scheme>_<format>/ for each case below: AutoRound's config.json and
model.safetensors (RTN: iters=0, disable_opt_rtn, 4 x 32 random calibration tokens) of a tiny random
Llama (vocab 64, hidden 64, 1 layer, 4 heads / 2 KV heads, intermediate 128, bfloat16), and
expected.safetensors: every Linear's weight (and lm_head's) as transformers loads it into an fp32 model
(`dtype=torch.float32`, the precision `eval` computes in). FP8 (FP8_STATIC, FP8_BLOCK): transformers'
default load (compressed-tensors' forward, which decompresses on the first call: `decompress_model`),
one fp32 product e4m3(weight) * weight_scale, kept in float32; these checkpoints store their scales in
bfloat16, where `CompressedTensorsConfig(dequantize=True)` would compute the product in bfloat16
instead. MXFP4 / MXFP8 / NVFP4: compressed-tensors decompression (`dequantize=True`), bfloat16 at any
model dtype (the decompressors compute in bfloat16), kept in bfloat16. AutoRound's own fp8_static
packing is not read by transformers; its expected weights are e4m3(weight) * weight_scale[:, None] in
float32, what AutoRound's inference code (`weight.to(dtype) * weight_scale`) computes in an fp32 model;
its llm_compressor packing holds the same tensors as the llm_compressor format (checked here), so it
shares that case's expected weights. Tokenizer files are not kept (the tests read weights only).

`--expected-only` recomputes expected.safetensors from the committed checkpoints under --out (no
auto-round needed).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

CASES = [  # scheme, AutoRound format
    ("MXFP4", "llm_compressor"),
    ("MXFP8", "llm_compressor"),
    ("NVFP4", "llm_compressor"),
    ("NVFP4", "auto_round"),
    ("FP8_STATIC", "llm_compressor"),
    ("FP8_STATIC", "auto_round"),
    ("FP8_BLOCK", "llm_compressor"),
]
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def make_model(d: str, tok_src: str, vocab: int = 64, layers: int = 1) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(7)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim == 2:
                p.normal_(0, 0.05)
    m.save_pretrained(d)
    for f in glob.glob(os.path.join(tok_src, "*")):
        shutil.copy(f, d)


def quantize(src: str, scheme: str, fmt: str, out: str) -> str:
    from auto_round import AutoRound
    calib = [torch.randint(3, 64, (1, 32), generator=torch.Generator().manual_seed(i)) for i in range(4)]
    ar = AutoRound(src, dataset=calib, scheme=scheme, iters=0, nsamples=4, seqlen=32, disable_opt_rtn=True,
                   disable_model_free=True, enable_torch_compile=False)
    ar.quantize_and_save(out, format=fmt)
    return os.path.dirname(glob.glob(os.path.join(out, "**", "model.safetensors"), recursive=True)[0])


def expected_weights(d: str, fmt: str) -> dict:
    names = [f"model.layers.0.{n}.weight" for n in LINEARS] + ["lm_head.weight"]
    qc = json.load(open(os.path.join(d, "config.json")))["quantization_config"]
    if fmt == "auto_round" and qc.get("packing_format") == "auto_round:fp8_static":
        f = safe_open(os.path.join(d, "model.safetensors"), "pt")
        res = {}
        for n in names:
            w = f.get_tensor(n)
            if w.dtype == torch.float8_e4m3fn:
                w = w.float() * f.get_tensor(n + "_scale").float().reshape(-1, 1)
                res[n] = w.contiguous()
            else:
                res[n] = w.to(torch.bfloat16)
        return res
    if fmt == "auto_round":  # transformers reads these through AutoRound's own integration
        raise ValueError("auto_round packing other than fp8_static: use the llm_compressor sibling's expected")
    from transformers import AutoModelForCausalLM
    from transformers.utils.quantization_config import CompressedTensorsConfig
    fp8 = any(g["weights"]["type"] == "float" and g["weights"]["num_bits"] == 8 and g["weights"].get("group_size") != 32
              for g in qc["config_groups"].values())
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, quantization_config=CompressedTensorsConfig(dequantize=not fp8))
    if fp8:  # what the first forward does (a forward itself fails on FP8_BLOCK's 128-wide activation groups here)
        m.hf_quantizer.compressor.decompress_model(m)
    sd = m.state_dict()
    ckpt = safe_open(os.path.join(d, "model.safetensors"), "pt")
    # A Linear stored dense though the config targets it (AutoRound's FP8_STATIC lm_head: `ignore` is
    # empty) is read as stored: the default load would multiply it by an uninitialized scale.
    return {n: (sd[n].float() if n + "_scale" in ckpt.keys() else ckpt.get_tensor(n).float()).contiguous()
            if fp8 else sd[n].to(torch.bfloat16).contiguous() for n in names}


def expected_only(out: str) -> None:
    for scheme, fmt in CASES:
        name = f"{scheme.lower()}_{fmt}"
        d = os.path.join(out, name)
        packing = json.load(open(os.path.join(d, "config.json")))["quantization_config"].get("packing_format")
        if fmt == "auto_round" and packing == "auto_round:llm_compressor":
            src = os.path.join(out, f"{scheme.lower()}_llm_compressor", "expected.safetensors")
            shutil.copy(src, os.path.join(d, "expected.safetensors"))
        else:
            save_file(expected_weights(d, fmt), os.path.join(d, "expected.safetensors"))
        print(f"{name}: expected.safetensors")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default="tests/data/autoround_golden/tokenizer")
    ap.add_argument("--expected-only", action="store_true")
    args = ap.parse_args()
    if args.expected_only:
        return expected_only(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "model_fp")
        make_model(src, args.tokenizer)
        for scheme, fmt in CASES:
            name = f"{scheme.lower()}_{fmt}"
            d = quantize(src, scheme, fmt, os.path.join(tmp, name))
            sibling = os.path.join(args.out, f"{scheme.lower()}_llm_compressor")
            packing = json.load(open(os.path.join(d, "config.json")))["quantization_config"].get("packing_format")
            if fmt == "auto_round" and packing == "auto_round:llm_compressor":
                # The same tensors as the llm_compressor output (checked), so the same weights.
                a = safe_open(os.path.join(d, "model.safetensors"), "pt")
                b = safe_open(os.path.join(sibling, "model.safetensors"), "pt")
                assert sorted(a.keys()) == sorted(b.keys())
                for k in a.keys():
                    assert torch.equal(a.get_tensor(k).view(torch.uint8), b.get_tensor(k).view(torch.uint8)), k
                f = safe_open(os.path.join(sibling, "expected.safetensors"), "pt")
                exp = {k: f.get_tensor(k) for k in f.keys()}
            else:
                exp = expected_weights(d, fmt)
            dst = os.path.join(args.out, name)
            shutil.rmtree(dst, ignore_errors=True)
            os.makedirs(dst)
            for f in ("config.json", "model.safetensors"):
                shutil.copy(os.path.join(d, f), dst)
            save_file(exp, os.path.join(dst, "expected.safetensors"))
            print(f"{name}: {sorted(os.listdir(dst))}")


if __name__ == "__main__":
    main()
