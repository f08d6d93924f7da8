#!/usr/bin/env python3
"""AutoRound's own RTN outputs of the weight-only float schemes, for tests/test_float_rtn_golden.cpp:
our `--iters 0 --disable_opt_rtn --format llm_compressor` run on the same model must write the same
tensors (issue 25, "RTN outputs tensor-identical to AutoRound's for each scheme on the same model").

Not part of the test suite and not run in CI. Needs the venv outside the repository (made with torch
2.15.0, transformers 5.24.0, compressed-tensors 0.20.1, auto-round 0.16.1, on the CPU). From the
repository root:

    /work/arvenv/bin/python tools/make_float_rtn_goldens.py --out tests/data/float_rtn

Writes tests/data/float_rtn/source/ (config.json, model.safetensors: a tiny random Llama as in
make_float_ckpt_goldens.py but with vocab 512, the tokenizer's: hidden 64, 1 layer, intermediate 128,
bf16; the tokenizer is tests/data/autoround_golden/tokenizer) and tests/data/float_rtn/<scheme>/
(config.json, and model.safetensors holding the Linears' tensors only) for each scheme below, written by AutoRound with iters=0, disable_opt_rtn=True,
act_bits=16 (weight-only), format llm_compressor. (FP8_BLOCK has no weight-only form in AutoRound:
it refuses act_bits=16 for block-wise FP8.)
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

from make_float_ckpt_goldens import make_model  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

SCHEMES = {  # directory: AutoRound arguments
    "mxfp4": dict(scheme="MXFP4", act_bits=16),
    "mxfp8": dict(scheme="MXFP8", act_bits=16),
    "nvfp4": dict(scheme="NVFP4", act_bits=16),
    "fpw8a16": dict(scheme="FPW8A16"),
    "fp8_channel": dict(scheme="FP8_STATIC", act_bits=16),
}


def quantize(src: str, kwargs: dict, out: str) -> str:
    from auto_round import AutoRound
    calib = [torch.randint(3, 64, (1, 32), generator=torch.Generator().manual_seed(i)) for i in range(4)]
    ar = AutoRound(src, dataset=calib, iters=0, nsamples=4, seqlen=32, disable_opt_rtn=True,
                   disable_model_free=True, enable_torch_compile=False, **kwargs)
    ar.quantize_and_save(out, format="llm_compressor")
    return os.path.dirname(glob.glob(os.path.join(out, "**", "model.safetensors"), recursive=True)[0])


def keep_linears(src: str, dst: str) -> dict:
    """An output's config.json and its Linears' tensors (the goldens keep no more; DeepSeek's
    kv_a_proj_with_mqa included) into dst, anew."""
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    shutil.copy(os.path.join(src, "config.json"), dst)
    with safe_open(os.path.join(src, "model.safetensors"), "pt") as f:
        keep = {k: f.get_tensor(k) for k in f.keys() if "_proj." in k or "_proj_with_mqa." in k}
    save_file(keep, os.path.join(dst, "model.safetensors"))
    return keep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default="tests/data/autoround_golden/tokenizer")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "model_fp")
        make_model(src, args.tokenizer, vocab=512)  # the tokenizer's vocabulary
        dst = os.path.join(args.out, "source")
        shutil.rmtree(dst, ignore_errors=True)
        os.makedirs(dst)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(src, f), dst)
        for name, kw in SCHEMES.items():
            d = quantize(src, kw, os.path.join(tmp, name))
            dst = os.path.join(args.out, name)
            keep_linears(d, dst)
            print(f"{name}: {sorted(os.listdir(dst))}")


if __name__ == "__main__":
    main()
