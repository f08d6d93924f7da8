#!/usr/bin/env python3
"""Does llama.cpp run our mixture-of-experts GGUF files with the perplexity our `eval` computes? (issue 24,
docs/moe.md)

Not part of the test suite. Needs the venv of tools/check_moe_loadability.py (torch, transformers) and
llama.cpp built outside the repository (docs/gguf.md: the copy vendored in llama-cpp-python 0.3.36's
sdist, `cmake --build build --target llama-perplexity`). From the repository root (a few minutes):

    /work/arvenv/bin/python tools/check_moe_gguf.py --autoround build/src/cli/autoround \\
        --llama_bin /path/to/llama.cpp/build/bin --work /tmp/moe_gguf

For Qwen3-MoE, Qwen2-MoE, Mixtral, DeepSeek-V3, GLM-4.5, gpt-oss, Gemma 3, Qwen3-Next and Qwen3.5 (dense,
MoE, multimodal) (`--archs` picks; hidden 256, 4 heads / 2 KV heads, 8 experts of 256, top-2, 2 layers, every
layer MoE as llama.cpp's qwen*moe requires, DeepSeek's and GLM's first layer dense, Gated DeltaNet layers of
2 key / 4 value heads of 64; random transformers weights, bf16; vocab 512)
it writes `--format gguf:<preset>,fake --iters 10` with our CLI (calibration: the built-in corpus),
then scores the file with `llama-perplexity -c 128 -b 128` and with our `eval --ctx 128` (the GGUF and
its fake companion) on 40 kB of TinyStories. Random weights make the perplexity large (~vocab size);
what is compared is that the three agree.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_loadability as cl  # noqa: E402
import check_moe_loadability as cml  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--autoround", default="build/src/cli/autoround")
    ap.add_argument("--llama_bin", required=True)
    ap.add_argument("--work", default="/tmp/moe_gguf")
    ap.add_argument("--presets", default="q4_k_m,q2_k_s")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--archs", default=",".join(cml.ARCHS))
    a = ap.parse_args()
    autoround = os.path.abspath(a.autoround)
    os.makedirs(a.work, exist_ok=True)
    held = os.path.join(a.work, "held.txt")
    ts = "/work/shared/fixtures/text/tinystories/tinystories_sample.txt"
    with open(ts, "rb") as f:
        open(held, "wb").write(f.read()[20_000:60_000])
    print("| model | preset | file MB | llama-perplexity PPL | our eval of the GGUF | our eval of fake |")
    print("|---|---|---|---|---|---|")
    ok = True
    for arch in a.archs.split(","):
        model = os.path.join(a.work, arch)
        if not os.path.exists(os.path.join(model, "config.json")):
            cml.make_model(arch, model, hidden=256, expert=256, dense_first=False, linear_dim=64)
        for preset in a.presets.split(","):
            out = os.path.join(a.work, f"{arch}_{preset}")
            r = subprocess.run([autoround, "--model", model, "--output_dir", out, "--format", f"gguf:{preset},fake",
                                "--iters", str(a.iters), "--nsamples", "16", "--seqlen", "128", "--threads", "2",
                                "--overwrite"], capture_output=True, text=True)
            if r.returncode:
                print(f"| {arch} | {preset} | quantize failed: {(r.stdout + r.stderr).strip().splitlines()[-1]} |")
                ok = False
                continue
            gguf = glob.glob(os.path.join(out, "gguf-*", "*.gguf"))[0]
            # Into a file: llama.cpp's asynchronous log drops its last lines (the final estimate) into a pipe.
            log = os.path.join(out, "llama-perplexity.log")
            with open(log, "w") as f:
                subprocess.run([os.path.join(a.llama_bin, "llama-perplexity"), "-m", gguf, "-f", held, "-c", "128",
                                "-b", "128"], stdout=f, stderr=subprocess.STDOUT)
            text = open(log).read()
            m = re.search(r"Final estimate: PPL = ([0-9.]+)", text)
            ppl_llama = float(m.group(1)) if m else None
            if not m:
                ok = False
                tail = text.strip().splitlines()[-3:]
            ours = []
            for d in (gguf, os.path.join(out, "fake")):
                e = subprocess.run([autoround, "eval", "--model", d, "--text", held, "--ctx", "128", "--json"],
                                   capture_output=True, text=True)
                ours.append(json.loads(e.stdout)["ppl"] if e.returncode == 0 else None)
            mb = os.path.getsize(gguf) / 1e6
            lstr = f"{ppl_llama:.2f}" if ppl_llama else "failed: " + " / ".join(tail)
            print(f"| {arch} | {preset} | {mb:.1f} | {lstr} | {ours[0]} | {ours[1]} |", flush=True)
            # 0.3%: llama.cpp multiplies k-quant weights with 8-bit activations, which moves tokens near a
            # routing tie to another expert (f16 files agree within 0.03%; docs/moe.md).
            if ppl_llama and ours[0] and abs(ppl_llama - ours[0]) > 3e-3 * ppl_llama:
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
