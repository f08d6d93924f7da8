#!/usr/bin/env python3
"""Quality and wall time on a mixture-of-experts model (issue 24): autoround.cpp against auto-round 0.16.1
on identical calibration tokens, W4 G128 symmetric, RTN (each tool's --iters 0 default: optimized RTN)
and SignRound, both written as auto_round and scored by our `autoround eval` (KL divergence and top-1
agreement against the FP model; it reads both tools' files).

Not part of the test suite. Needs the venv outside the repository (torch, transformers, auto-round) and
the built CLI. From the repository root (about 15 minutes on 2 cores):

    /work/arvenv/bin/python tools/moe_quality.py --autoround build/src/cli/autoround --work /tmp/moeq

The model (--arch): Qwen3MoeForCausalLM (default) or GptOssForCausalLM generated with transformers
(hidden 256, 2 layers, 4 heads of 64 / 2 KV heads, 16 experts of 128, top-4 (Qwen3-MoE: renormalized;
gpt-oss: sinks, a 128-key window on layer 0, biased experts, the clamped SwiGLU, YaRN), transformers'
initialisation under torch.manual_seed(0), bfloat16, as save_pretrained writes them) with the Llama-2
tokenizer; or Qwen3NextForCausalLM / Qwen3_5MoeForCausalLM (the same experts and a shared expert of 256, layer
0 gated full attention, layer 1 Gated DeltaNet of 2 key / 4 value heads of 64; in_proj_ba kept 16-bit in both
tools); or the dense Gemma3ForCausalLM (4 layers alternating a 128-key window and global attention,
intermediate 1024, query_pre_attn_scalar 64, tied embeddings). Calibration: compare_autoround.py's (--nsamples WikiText-2 documents of more than --seqlen
tokens, the same ids for both tools). Evaluation text: the TinyStories sample's bytes 1.0-1.1 MB,
256-token windows. Peak RSS: ours from /usr/bin/time -v, AutoRound's worker from getrusage.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_autoround as ca  # noqa: E402
import float_quality as fq  # noqa: E402

TAG = "MOEQ_WORKER "


def make_model(d, seqlen, arch="qwen3_moe"):
    if (d / "config.json").exists():
        return
    import torch
    from transformers import (AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig, GptOssConfig, GptOssForCausalLM,
                              Qwen3MoeConfig, Qwen3MoeForCausalLM, Qwen3NextConfig, Qwen3NextForCausalLM,
                              Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig)

    d.mkdir(parents=True, exist_ok=True)
    tk = ca.FIXTURES / "tokenizers/llama2-spm"
    for f in ca.TOKENIZER_FILES:
        if (tk / f).exists():
            shutil.copyfile(tk / f, d / f)
    tok = AutoTokenizer.from_pretrained(d)
    common = dict(vocab_size=len(tok), hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, num_experts_per_tok=4, tie_word_embeddings=False,
                  max_position_embeddings=max(4096, seqlen), bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    if arch == "gemma3":  # dense: sliding (128 keys), global, sliding, global; tied embeddings
        common.update(num_hidden_layers=4, tie_word_embeddings=True)
        model = Gemma3ForCausalLM(Gemma3TextConfig(**common, intermediate_size=1024, sliding_window=128,
                                                   query_pre_attn_scalar=64,
                                                   layer_types=["sliding_attention", "full_attention"] * 2))
    elif arch in ("qwen3_next", "qwen3_5_moe"):  # gated full attention, then a Gated DeltaNet layer (2 key / 4
        # value heads of 64). Full attention first: auto-round 0.16.1 passes every block the first block's
        # attention_mask, and a linear layer's (the 2-D token mask) fails in a full-attention layer's SDPA.
        linear = dict(moe_intermediate_size=128, num_experts=16, shared_expert_intermediate_size=256,
                      linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
                      linear_value_head_dim=64, layer_types=["full_attention", "linear_attention"])
        if arch == "qwen3_next":
            model = Qwen3NextForCausalLM(Qwen3NextConfig(**common, **linear, intermediate_size=768, norm_topk_prob=True))
        else:
            model = Qwen3_5MoeForCausalLM(Qwen3_5MoeTextConfig(**common, **linear, pad_token_id=0))
    elif arch == "gpt_oss":
        model = GptOssForCausalLM(GptOssConfig(**common, intermediate_size=128, num_local_experts=16,
                                               sliding_window=128))
    else:
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**common, intermediate_size=768, moe_intermediate_size=128,
                                                   num_experts=16, norm_topk_prob=True))
    model.to(torch.bfloat16).eval().save_pretrained(d)


def drop_full_attention_mask_in_linear_layers():
    """auto-round 0.16.1 gives every block the first block's attention_mask: a Gated DeltaNet layer handed the
    full-attention layers' 4-D causal mask multiplies its input by it (transformers 5.25's
    apply_mask_to_padding_states) and fails on the shape. Unpadded calibration, as here, gets no mask in the
    linear layers from transformers itself, so the worker drops a 4-D one there: the same computation."""
    import importlib
    for module, cls in (("qwen3_next.modeling_qwen3_next", "Qwen3NextGatedDeltaNet"),
                        ("qwen3_5_moe.modeling_qwen3_5_moe", "Qwen3_5MoeGatedDeltaNet")):
        c = getattr(importlib.import_module("transformers.models." + module), cls)
        def forward(self, hidden_states, *args, _orig=c.forward, attention_mask=None, **kwargs):
            if attention_mask is not None and attention_mask.dim() != 2:
                attention_mask = None
            return _orig(self, hidden_states, *args, attention_mask=attention_mask, **kwargs)
        c.forward = forward


def worker(a):
    import torch
    from auto_round import AutoRound

    drop_full_attention_mask_in_linear_layers()

    samples = json.loads(Path(a.ids_file).read_text())["samples"]
    dataset = [torch.tensor([s], dtype=torch.long) for s in samples]
    t0 = time.perf_counter()
    # Gated DeltaNet's in_proj_ba (Qwen3.5: in_proj_b, in_proj_a) stay 16-bit in ours (docs/architectures.md):
    # kept in AutoRound's run too, so both quantize the same Linears.
    cfg = json.loads((Path(a.model_dir) / "config.json").read_text())
    keep = {n: {"bits": 16} for n in ("in_proj_ba", "in_proj_b", "in_proj_a")} if "layer_types" in cfg and \
        "linear_attention" in cfg["layer_types"] else None
    ar = AutoRound(a.model_dir, bits=4, group_size=128, sym=True, iters=a.iters, nsamples=len(samples),
                   seqlen=a.seqlen, batch_size=a.batch_size, dataset=dataset, device_map="cpu", layer_config=keep)
    _, folders = ar.quantize_and_save(output_dir=a.out, format="auto_round")
    folders = folders if isinstance(folders, (list, tuple)) else [folders]
    if keep:  # auto-round re-saves the tokenizer as transformers' Qwen3.5 class, byte-level: eval reads the model's
        for f in ca.TOKENIZER_FILES:
            if (Path(a.model_dir) / f).exists():
                shutil.copyfile(Path(a.model_dir) / f, Path(folders[0]) / f)
    import resource
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(TAG + json.dumps({"dir": str(folders[0]), "s": time.perf_counter() - t0, "rss_mb": rss_mb}), flush=True)


def autoround_run(a, model, ids_file, out, iters, env):
    """The worker (AutoRound on the ids) in its own process: its output directory, wall s and peak RSS MiB."""
    wcmd = [sys.executable, __file__, "--_worker", "--model_dir", str(model), "--ids_file", str(ids_file),
            "--out", str(out), "--iters", str(iters), "--seqlen", str(a.seqlen), "--batch_size", str(a.batch_size)]
    t0 = time.perf_counter()
    r = subprocess.run(wcmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    res = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith(TAG)]
    if r.returncode or not res:
        sys.exit(f"auto-round failed (iters {iters}):\n{(r.stdout + r.stderr)[-3000:]}")
    j = json.loads(res[-1][len(TAG):])
    return j["dir"], wall, j["rss_mb"]


def main():
    ap = fq.run_args("/tmp/moeq")
    ap.add_argument("--arch", choices=("qwen3_moe", "gpt_oss", "gemma3", "qwen3_next", "qwen3_5_moe"), default="qwen3_moe")
    a = ap.parse_args()
    if a._worker:
        return worker(a)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    model = work / {"qwen3_moe": "qwen3moe-h256-e16x128-top4", "gpt_oss": "gptoss-h256-e16x128-top4",
                    "gemma3": "gemma3-h256-i1024-l4", "qwen3_next": "qwen3next-h256-e16x128-top4",
                    "qwen3_5_moe": "qwen35moe-h256-e16x128-top4"}[a.arch]
    make_model(model, a.seqlen, a.arch)
    g = argparse.Namespace(seqlen=a.seqlen, nsamples=a.nsamples, text=str(ca.FIXTURES / "text/wikitext-2-raw/wiki.test.raw"))
    jsonl, ids_file, _, _ = ca.build_calibration(g, work, model)
    evaltxt = work / "eval.txt"
    evaltxt.write_bytes((ca.FIXTURES / "text/tinystories/tinystories_sample.txt").read_bytes()[1_000_000:1_100_000])
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    print(f"model {model.name}; calibration {a.nsamples} x {a.seqlen} tokens; SignRound {a.iters} iters, "
          f"batch {a.batch_size}; nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")
    print("| method | KL mean ours | KL mean AutoRound | top-1 ours / AutoRound | wall s ours / AutoRound | "
          "peak RSS MiB ours / AutoRound |")
    print("|---|---|---|---|---|---|")
    rows = []
    for method, iters in (("RTN", 0), (f"SignRound {a.iters}", a.iters)):
        out_ours = work / f"ours-{iters}"
        cmd = [a.autoround, "quantize", "--model", str(model), "--iters", str(iters), "--nsamples", str(a.nsamples),
               "--seqlen", str(a.seqlen), "--batch_size", str(a.batch_size), "--dataset", str(jsonl), "--bits", "4",
               "--group_size", "128", "--format", "auto_round", "--output_dir", str(out_ours), "--overwrite"]
        t0 = time.perf_counter()
        r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
        w_ours = time.perf_counter() - t0
        if r.returncode:
            sys.exit(f"ours failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
        rss_ours = [int(l.split()[-1]) / 1024 for l in r.stderr.splitlines() if "Maximum resident set size" in l][0]
        routing = [l for l in r.stderr.splitlines() if "experts received no token" in l]
        ar_dir, w_ar, rss_ar = autoround_run(a, model, ids_file, work / f"ar-{iters}", iters, env)
        ko, eo = fq.kl(a, out_ours, model, evaltxt)
        ka, ea = fq.kl(a, ar_dir, model, evaltxt)
        rows.append({"method": method, "ours": ko, "autoround": ka, "err": [eo, ea], "wall_ours": w_ours,
                     "wall_autoround": w_ar, "rss_mb_ours": rss_ours, "rss_mb_autoround": rss_ar, "routing": routing})
        f = lambda j, k, fmt: (fmt % j[k]) if j else "n/a"  # noqa: E731
        print(f"| {method} | {f(ko, 'kl_mean', '%.5f')} | {f(ka, 'kl_mean', '%.5f')} | "
              f"{f(ko, 'top1_agreement', '%.4f')} / {f(ka, 'top1_agreement', '%.4f')} | {w_ours:.1f} / {w_ar:.1f} | "
              f"{rss_ours:.0f} / {rss_ar:.0f} |"
              + (f" ours: {eo}" if eo else "") + (f" AutoRound: {ea}" if ea else ""), flush=True)
        for line in routing:
            print("    " + line.split("] ", 1)[-1])
    (work / "moe_quality.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
