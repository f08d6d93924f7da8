#!/usr/bin/env python3
"""Quality and tuning time of the float schemes (issue 25): autoround.cpp against auto-round 0.16.1 on
identical calibration tokens, RTN (each tool's --iters 0 default: optimized RTN for MX / NVFP4, plain
for FP8) and SignRound, weight-only (act_bits 16) except FP8_STATIC (W8A8 with static activation
scales), written as llm_compressor and scored by our `autoround eval` (KL divergence against the FP
model, which reads both tools' outputs; FP8_STATIC's with every quantized Linear's input through the
E4M3 QDQ of its stored input_scale).

Not part of the test suite. Needs the venv outside the repository (torch, transformers, auto-round,
compressed-tensors) and the built CLI. From the repository root (about 25 minutes on 2 cores):

    /work/arvenv/bin/python tools/float_quality.py --autoround build/src/cli/autoround --work /tmp/fq
    /work/arvenv/bin/python tools/float_quality.py --stories260k --seqlen 128 --work /tmp/fq260   # the fixture

The model and calibration are compare_autoround.py's (a random Llama generated with transformers,
here hidden 256, intermediate 768, 2 layers, 4 heads / 2 KV heads, the Llama-2 tokenizer; --nsamples
WikiText-2 documents of more than --seqlen tokens, the same token ids for both tools). With --stories260k:
the stories260K fixture converted by our CLI (hidden 64, intermediate 172, 5 layers, its 512-token
SentencePiece vocabulary, which transformers reads from the converted directory; our ids checked equal to
transformers' on the first documents), calibrated on the TinyStories sample. Evaluation text: the
TinyStories sample's bytes 1.0-1.1 MB, 256-token windows.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_autoround as ca  # noqa: E402

# AutoRound gets the weight type through data_type on its default W4A16 scheme (act_bits 16 on every
# layer, checked in the worker). Its llm_compressor export labels MX / NVFP4 checkpoints with the
# compressed-tensors presets' 4- or 8-bit input activations even then (0.16.1, export_to_fp.py
# _get_scheme); our eval reads the weights only.
SCHEMES = [  # name, our flags, AutoRound kwargs
    ("MXFP4", ["--data_type", "mx_fp", "--bits", "4"], dict(bits=4, group_size=32, data_type="mx_fp", act_bits=16)),
    ("MXFP8", ["--data_type", "mx_fp", "--bits", "8"], dict(bits=8, group_size=32, data_type="mx_fp", act_bits=16)),
    ("NVFP4", ["--scheme", "NVFP4", "--act_bits", "16"], dict(bits=4, group_size=16, data_type="nv_fp", act_bits=16)),
    ("FPW8A16", ["--scheme", "FPW8A16"], dict(scheme="FPW8A16")),
    # AutoRound refuses FP8_BLOCK weight-only ("only supports dynamic fp8 activation quantization"): it
    # tunes with its dynamic per-group activation QDQ, ours weight-only; eval scores both files' weights.
    ("FP8_BLOCK", ["--scheme", "FP8_BLOCK", "--act_bits", "16"], dict(scheme="FP8_BLOCK")),
    # W8A8: both tools tune with the activations fake-quantized; eval reads both outputs as W8A8.
    ("FP8_STATIC", ["--scheme", "FP8_STATIC"], dict(scheme="FP8_STATIC")),
]
# The schemes whose activations AutoRound quantizes here: bits, dynamic. The others are weight-only.
ACT_BITS = {"FP8_STATIC": ([8], False), "FP8_BLOCK": ([8], True)}
TAG = "FQ_WORKER "


def worker(a):
    import torch
    from auto_round import AutoRound

    samples = json.loads(Path(a.ids_file).read_text())["samples"]
    dataset = [torch.tensor([s], dtype=torch.long) for s in samples]
    kw = json.loads(a.ar_kwargs)
    t0 = time.perf_counter()
    ar = AutoRound(a.model_dir, iters=a.iters, nsamples=len(samples), seqlen=a.seqlen, batch_size=a.batch_size,
                   dataset=dataset, device_map="cpu", disable_model_free=True, **kw)
    _, folders = ar.quantize_and_save(output_dir=a.out, format="llm_compressor")
    folders = folders if isinstance(folders, (list, tuple)) else [folders]
    acts = sorted({getattr(m, "act_bits", 16) for m in ar.model.modules() if hasattr(m, "act_bits")})
    if a.scheme_name in ACT_BITS:  # its packed layers drop act_bits: read the exported config instead
        cfg = json.loads((Path(folders[0]) / "config.json").read_text())["quantization_config"]
        groups = [g.get("input_activations") for g in cfg.get("config_groups", {}).values()]
        bits, dynamic = ACT_BITS[a.scheme_name]
        if not groups or any(not g or g.get("num_bits") not in bits or bool(g.get("dynamic")) != dynamic for g in groups):
            sys.exit(f"auto-round's input_activations {groups}, expected {bits}-bit, dynamic {dynamic}")
    elif acts != [16]:  # the comparison is weight-only
        sys.exit(f"auto-round quantizes activations: act_bits {acts}")
    print(TAG + json.dumps({"dir": str(folders[0]), "s": time.perf_counter() - t0}), flush=True)


def kl(a, out, model, text):
    r = subprocess.run([a.autoround, "eval", "--model", str(out), "--ref-model", str(model), "--text", str(text),
                        "--ctx", "256", "--json"], capture_output=True, text=True)
    if r.returncode:
        return None, (r.stdout + r.stderr).strip().splitlines()[-1]
    j = json.loads(r.stdout)
    return j, None


def autoround_run(script, a, model, ids_file, out, iters, env, tag, what, extra=()):
    """`script --_worker ...` in its own process (AutoRound on the ids): its output directory and wall s."""
    wcmd = [sys.executable, script, "--_worker", "--model_dir", str(model), "--ids_file", str(ids_file),
            "--out", str(out), "--iters", str(iters), "--seqlen", str(a.seqlen), "--batch_size", str(a.batch_size)]
    t0 = time.perf_counter()
    r = subprocess.run(wcmd + list(extra), capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    res = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith(tag)]
    if r.returncode or not res:
        sys.exit(f"auto-round failed ({what}):\n{(r.stdout + r.stderr)[-3000:]}")
    return json.loads(res[-1][len(tag):])["dir"], wall


def run_args(work):
    """The options a side-by-side quality run shares (this tool, moe_quality.py): the CLI, the work
    directory, SignRound's iterations, the calibration and the batch; and the worker's own."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--autoround", default=str(ca.REPO / "build/src/cli/autoround"))
    ap.add_argument("--work", default=work)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--nsamples", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=256)
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--_worker", action="store_true")
    ap.add_argument("--model_dir")
    ap.add_argument("--ids_file")
    ap.add_argument("--out")
    return ap


def main():
    ap = run_args("/tmp/fq")
    ap.add_argument("--schemes", default=",".join(s[0] for s in SCHEMES))
    ap.add_argument("--stories260k", action="store_true",
                    help="the stories260K fixture (converted by our CLI) calibrated on TinyStories, not the random Llama")
    ap.add_argument("--ar_kwargs", default="{}")
    ap.add_argument("--scheme_name", default="")
    a = ap.parse_args()
    if a._worker:
        return worker(a)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    g = argparse.Namespace(hidden=256, intermediate=768, layers=2, heads=4, kv_heads=2, rope_theta=500000.0,
                           tokenizer=str(ca.FIXTURES / "tokenizers/llama2-spm"), seed=0, seqlen=a.seqlen,
                           nsamples=a.nsamples, text=str(ca.FIXTURES / "text/wikitext-2-raw/wiki.test.raw"))
    if a.stories260k:  # the real model, calibrated on its own training distribution
        model = work / "stories260K"
        if not (model / "config.json").exists():
            f = ca.FIXTURES / "stories260K"
            subprocess.run([a.autoround, "convert", "--llama2c", str(f / "stories260K.bin"), "--tokenizer",
                            str(f / "tok512.bin"), "--out", str(model)], check=True, capture_output=True)
        g.text = str(ca.FIXTURES / "text/tinystories/tinystories_sample.txt")
        g.verify_docs, g.autoround = 4, a.autoround
        jsonl, ids_file, docs, full_ids = ca.build_calibration(g, work, model)
        ca.verify_tokenizer(g, work, model, docs, full_ids)  # both tools read the same ids
    else:
        model = ca.ensure_model(g, work)
        jsonl, ids_file, _, _ = ca.build_calibration(g, work, model)
    ts = ca.FIXTURES / "text/tinystories/tinystories_sample.txt"
    evaltxt = work / "eval.txt"
    evaltxt.write_bytes(ts.read_bytes()[1_000_000:1_100_000])
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    print(f"model {model.name}; calibration {a.nsamples} x {a.seqlen} tokens; SignRound {a.iters} iters, batch {a.batch_size}")
    print("| scheme | method | KL mean ours | KL mean AutoRound | top-1 ours / AutoRound | wall s ours / AutoRound |")
    print("|---|---|---|---|---|---|")
    rows = []
    for name, ours_flags, ar_kw in SCHEMES:
        if name not in a.schemes.split(","):
            continue
        for method, iters in (("RTN", 0), (f"SignRound {a.iters}", a.iters)):
            tag = f"{name}-{iters}"
            out_ours = work / f"ours-{tag}"
            cmd = [a.autoround, "quantize", "--model", str(model), "--iters", str(iters), "--nsamples",
                   str(a.nsamples), "--seqlen", str(a.seqlen), "--batch_size", str(a.batch_size), "--dataset",
                   str(jsonl), "--format", "llm_compressor", "--output_dir", str(out_ours), "--overwrite"] + ours_flags
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True)
            w_ours = time.perf_counter() - t0
            if r.returncode:
                sys.exit(f"ours failed: {shlex.join(cmd)}\n{r.stderr[-2000:]}")
            ar_dir, w_ar = autoround_run(__file__, a, model, ids_file, work / f"ar-{tag}", iters, env, TAG, tag,
                                         ["--ar_kwargs", json.dumps(ar_kw), "--scheme_name", name])
            ko, eo = kl(a, out_ours, model, evaltxt)
            ka, ea = kl(a, ar_dir, model, evaltxt)
            row = {"scheme": name, "method": method, "ours": ko, "autoround": ka, "err": [eo, ea],
                   "wall_ours": w_ours, "wall_autoround": w_ar}
            rows.append(row)
            f = lambda j, k, fmt: (fmt % j[k]) if j else "n/a"  # noqa: E731
            print(f"| {name} | {method} | {f(ko, 'kl_mean', '%.5f')} | {f(ka, 'kl_mean', '%.5f')} | "
                  f"{f(ko, 'top1_agreement', '%.4f')} / {f(ka, 'top1_agreement', '%.4f')} | "
                  f"{w_ours:.1f} / {w_ar:.1f} |" + (f" ours: {eo}" if eo else "") + (f" AutoRound: {ea}" if ea else ""),
                  flush=True)
    (work / "float_quality.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
