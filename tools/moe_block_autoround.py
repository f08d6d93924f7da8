#!/usr/bin/env python3
"""AutoRound 0.16.1's tuning time per iteration on a Qwen3-30B-A3B-shaped block (issue 24; docs/moe.md,
"Speed"), to set beside `bench/tune_bench --experts 128 --topk 8 ...` on the same CPU.

Not part of the test suite. Needs the venv outside the repository (torch, transformers, auto-round).
It generates a one-layer Qwen3MoeForCausalLM (hidden 2048, 32 heads / 4 KV heads of 128, 128 experts of
768, top-8 renormalized, the Llama-2 tokenizer, random transformers weights, bf16) once under --work, then
runs AutoRound(bits=4, group_size=128, sym=True, nsamples=8, seqlen=512, batch_size=8, its defaults
otherwise) on 8 random token sequences, once with iters=1 and once with iters=4, each in its own process
under /usr/bin/time -v; the time per iteration is the difference divided by 3 (model load, calibration
and packing cancel). About 6 minutes and 16 GB on 2 cores:

    /work/arvenv/bin/python tools/moe_block_autoround.py --work /tmp/arblock
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

TAG = "ARBLOCK "


def make_model(d: Path):
    if (d / "config.json").exists():
        return
    import torch
    from transformers import AutoTokenizer, Qwen3MoeConfig, Qwen3MoeForCausalLM

    d.mkdir(parents=True, exist_ok=True)
    tk = Path("/work/shared/fixtures/tokenizers/llama2-spm")
    for f in os.listdir(tk):
        shutil.copyfile(tk / f, d / f)
    tok = AutoTokenizer.from_pretrained(d)
    cfg = Qwen3MoeConfig(vocab_size=len(tok), hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                         num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                         num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, max_position_embeddings=4096,
                         tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    Qwen3MoeForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d)


def worker(model: str, iters: int):
    import torch
    from auto_round import AutoRound

    g = torch.Generator().manual_seed(1)
    data = [torch.randint(3, 32000, (1, 512), generator=g) for _ in range(8)]
    t0 = time.perf_counter()
    ar = AutoRound(model, bits=4, group_size=128, sym=True, iters=iters, nsamples=8, seqlen=512, batch_size=8,
                   dataset=data, device_map="cpu")
    ar.quantize()
    print(TAG + json.dumps({"iters": iters, "quantize_s": time.perf_counter() - t0}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/arblock")
    ap.add_argument("--_worker", type=int, default=0)
    a = ap.parse_args()
    model = Path(a.work) / "qwen3moe-30b-a3b-block"
    if a._worker:
        return worker(str(model), a._worker)
    make_model(model)
    runs = {}
    for iters in (1, 4):
        r = subprocess.run(["/usr/bin/time", "-v", sys.executable, __file__, "--work", a.work, "--_worker", str(iters)],
                           capture_output=True, text=True)
        res = [l for l in r.stdout.splitlines() if l.startswith(TAG)]
        if r.returncode or not res:
            sys.exit(f"auto-round failed (iters {iters}):\n{r.stderr[-3000:]}")
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
        runs[iters] = (json.loads(res[0][len(TAG):])["quantize_s"], int(rss.group(1)) / 1024 if rss else 0)
        print(f"iters {iters}: quantize {runs[iters][0]:.1f} s, peak RSS {runs[iters][1]:.0f} MiB", flush=True)
    print(f"AutoRound: {(runs[4][0] - runs[1][0]) / 3:.2f} s per iteration (8 x 512 tokens)")


if __name__ == "__main__":
    sys.exit(main())
