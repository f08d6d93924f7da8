#!/usr/bin/env python3
"""AutoRound 0.16.1 and autoround.cpp on the same device, the same model and the same calibration ids (issue
58's "AutoRound on the same card"): whole-process wall time, peak device memory, peak RSS, and the KL divergence
of both outputs against the unquantized model, scored by one torch evaluation on the device.

Run by scripts/gpu-check.sh (AR_COMPARE=N) on a GPU machine; runs anywhere torch, transformers and auto-round
import (--device cpu, for checking the harness itself):

    python3 tools/gpu_vs_autoround.py --autoround BIN --fixtures DIR --work W --layers N [--device cuda:0]

The model: LlamaForCausalLM of N Llama-3-8B-shaped blocks (hidden 4096, intermediate 14336, 32/8 heads of 128,
rope_theta 500000) with the Llama-2 tokenizer's 32000 ids, transformers' random initialisation under
torch.manual_seed(--seed), bfloat16, written by save_pretrained. Calibration: --nsamples consecutive pieces of
WikiText-2's test split, each BOS + seqlen-1 ids of the Llama-2 tokenizer; autoround.cpp reads them as a JSONL of
input_ids (one sample per line, used as they are), AutoRound as a list of LongTensor[1, seqlen]. Both at
AutoRound's defaults otherwise: W4G128 symmetric, 200 iterations, batch 8, format auto_round, amp, and for
AutoRound its own default of torch.compile (on from 10 iterations; the first run of a shape compiles cold).

Scoring: every output's packed Linears are dequantized here (GPTQ layout, autoround-spec.md section 8) into the
same transformers model in fp32, which runs --eval_bytes of TinyStories in windows of --eval_ctx (the first id
of each window BOS) as `autoround eval` does: KL(FP || quantized) and top-1 agreement over each window's second
half. --check_eval also runs `autoround eval` on both outputs (the CPU; small models only) to cross-check.

Measured per tool, each a process of its own: wall seconds from start to exit (load, calibration, tuning,
packing, saving), peak RSS (getrusage of a small wrapper interpreter that forks the tool), and peak device memory as nvidia-smi's memory.used over the run, polled every
0.2 s, minus its value before (the same measure for both; the CUDA context included).

auto-round's dependency `datasets` is only used for named datasets; where it does not import (the GPU image has
no datasets wheel for its pyarrow), the worker installs a stand-in module whose calls fail by name, since token-id
datasets never reach them.
"""
from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

TAG = "GVA_WORKER "
RSS_TAG = "GVA_PEAK_RSS_KB "
# Runs argv[1:] and reports its peak RSS. A small interpreter of its own forks the tool, so the count
# starts from its few MiB, not from this process's (torch loaded: a forked child's peak RSS includes the
# parent's pages until it execs).
RSS_WRAPPER = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
               "print('" + RSS_TAG + "%d' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True); "
               "sys.exit(rc)")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--autoround", help="the autoround binary")
    ap.add_argument("--fixtures", help="a folder holding llama2-spm/ (the tokenizer), wiki.test.raw[.xz] and an eval "
                                       "text tinystories*.txt")
    ap.add_argument("--work", default="/tmp/gva")
    ap.add_argument("--device", default="cuda:0", help="cuda:N, or cpu")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=14336)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv_heads", type=int, default=8)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--nsamples", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval_bytes", type=int, default=64000, help="the evaluation text: this many bytes of TinyStories")
    ap.add_argument("--eval_ctx", type=int, default=512)
    ap.add_argument("--ours_args", default="", help="extra flags for autoround quantize")
    ap.add_argument("--check_eval", action="store_true", help="also score both outputs with `autoround eval`")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model_dir", help=argparse.SUPPRESS)
    ap.add_argument("--ids_file", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    return ap.parse_args()


# ----------------------------------------------------------------------------------------------------------------
# The model and the calibration ids
# ----------------------------------------------------------------------------------------------------------------

def read_text(path: Path) -> str:
    return lzma.decompress(path.read_bytes()).decode() if path.suffix == ".xz" else path.read_text(encoding="utf-8")


def make_model(a, d: Path, tokenizer: Path) -> None:
    """The generated Llama model (once per shape; GENERATED.json marks it complete)."""
    shape = {k: getattr(a, k) for k in ("layers", "hidden", "intermediate", "heads", "kv_heads", "seed")}
    stamp = d / "GENERATED.json"
    if stamp.exists() and json.loads(stamp.read_text()) == shape:
        return
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for f in TOKENIZER_FILES:
        if (tokenizer / f).exists():
            shutil.copyfile(tokenizer / f, d / f)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=a.hidden, intermediate_size=a.intermediate,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                      head_dim=a.hidden // a.heads, rope_theta=500000.0, max_position_embeddings=max(4096, a.seqlen),
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, dtype=torch.bfloat16)
    torch.manual_seed(a.seed)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d)
    stamp.write_text(json.dumps(shape))


def tokenize(model_dir: Path, text: str) -> tuple[list[int], int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    return tok(text, add_special_tokens=False)["input_ids"], tok.bos_token_id


def calibration(a, model_dir: Path, wiki: Path, work: Path) -> tuple[Path, Path]:
    """nsamples pieces of BOS + seqlen-1 consecutive ids: a JSONL for ours, a JSON list for AutoRound's worker."""
    ids, bos = tokenize(model_dir, read_text(wiki))
    step = a.seqlen - 1
    if len(ids) < a.nsamples * step:
        sys.exit(f"{wiki}: {len(ids)} ids, fewer than {a.nsamples} x {step}")
    samples = [[bos] + ids[i * step:(i + 1) * step] for i in range(a.nsamples)]
    jsonl, ids_file = work / f"calib-{a.nsamples}x{a.seqlen}.jsonl", work / f"calib-{a.nsamples}x{a.seqlen}.json"
    with open(jsonl, "w") as f:
        for s in samples:
            f.write(json.dumps({"input_ids": s}) + "\n")
    ids_file.write_text(json.dumps(samples))
    return jsonl, ids_file


# ----------------------------------------------------------------------------------------------------------------
# Running a tool: wall, peak RSS, peak device memory
# ----------------------------------------------------------------------------------------------------------------

class DeviceMemoryWatch:
    """nvidia-smi's memory.used of one GPU, polled while a run lasts; peak_mib() is the rise over the start."""

    def __init__(self, device: str):
        self.index = device.split(":")[1] if device.startswith("cuda") else None
        self.base = self.read()
        self.peak = self.base
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)

    def read(self):
        if self.index is None:
            return None
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i",
                                self.index], capture_output=True, text=True, timeout=10)
            return float(r.stdout.split()[0])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            return None

    def poll(self):
        while not self.stop.wait(0.2):
            v = self.read()
            if v is not None and (self.peak is None or v > self.peak):
                self.peak = v

    def __enter__(self):
        if self.base is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def peak_mib(self):
        return None if self.base is None or self.peak is None else self.peak - self.base


def run_tool(name: str, cmd: list[str], log: Path, device: str, env=None) -> dict:
    """Runs cmd as its own process with its output in log: wall s, exit status, peak RSS and device MiB."""
    print(f"{name}: {' '.join(cmd)}", flush=True)
    with DeviceMemoryWatch(device) as mem, open(log, "w") as out:
        t0 = time.perf_counter()
        rc = subprocess.run([sys.executable, "-c", RSS_WRAPPER] + cmd, stdout=out, stderr=subprocess.STDOUT,
                            env=env).returncode
        wall = time.perf_counter() - t0
    rss = [int(l[len(RSS_TAG):]) for l in log.read_text(errors="replace").splitlines() if l.startswith(RSS_TAG)]
    r = {"wall_s": round(wall, 2), "rc": rc, "peak_rss_mib": round(rss[-1] / 1024) if rss else None,
         "peak_device_mib": mem.peak_mib(), "log": str(log)}
    print(f"{name}: {r}", flush=True)
    if rc:
        print("".join(log.read_text(errors="replace").splitlines(keepends=True)[-30:]), flush=True)
    return r


def install_datasets_stand_in():
    """auto-round imports `datasets` at start-up and uses it only for named datasets; see the module's doc."""
    try:
        import datasets  # noqa: F401
        return False
    except ImportError:
        pass
    m = types.ModuleType("datasets")
    m.__version__ = "0 (stand-in: token-id calibration only)"

    def missing(name):
        def call(*args, **kwargs):
            raise ImportError(f"datasets.{name}: the package is not installed (this run feeds token ids)")
        return call

    for name in ("load_dataset", "load_from_disk", "concatenate_datasets"):
        setattr(m, name, missing(name))
    for name in ("Dataset", "IterableDataset", "Features", "Sequence", "Value"):
        setattr(m, name, type(name, (), {"__init__": missing(name), "from_list": staticmethod(missing(name))}))
    sys.modules["datasets"] = m
    return True


def worker(a):
    """AutoRound on the ids, in its own process (the parent measures it)."""
    stand_in = install_datasets_stand_in()
    import torch
    from auto_round import AutoRound

    samples = json.loads(Path(a.ids_file).read_text())
    dataset = [torch.tensor([s], dtype=torch.long) for s in samples]
    t0 = time.perf_counter()
    ar = AutoRound(a.model_dir, bits=4, group_size=128, sym=True, iters=a.iters, nsamples=len(samples),
                   seqlen=a.seqlen, batch_size=a.batch_size, dataset=dataset, device_map=a.device)
    _, folders = ar.quantize_and_save(output_dir=a.out, format="auto_round")
    folders = folders if isinstance(folders, (list, tuple)) else [folders]
    cuda = torch.cuda.is_available() and a.device.startswith("cuda")
    print(TAG + json.dumps({"dir": str(folders[0]), "quantize_s": time.perf_counter() - t0,
                            "torch_peak_reserved_mib": torch.cuda.max_memory_reserved() / 2**20 if cuda else None,
                            "datasets_stand_in": stand_in, "torch": torch.__version__}), flush=True)


# ----------------------------------------------------------------------------------------------------------------
# Scoring: dequantize, then KL on the device
# ----------------------------------------------------------------------------------------------------------------

def unpack(words, bits: int, dim: int):
    """The bits-wide fields of int32 words packed along dim (GPTQ: field t of a word at bit bits * t)."""
    import torch

    per = 32 // bits
    shifts = torch.arange(0, 32, bits, dtype=torch.int32, device=words.device)
    if dim == 0:
        v = (words.unsqueeze(1) >> shifts.view(1, per, 1)) & ((1 << bits) - 1)
        return v.reshape(words.shape[0] * per, words.shape[1])
    v = (words.unsqueeze(2) >> shifts.view(1, 1, per)) & ((1 << bits) - 1)
    return v.reshape(words.shape[0], words.shape[1] * per)


def dequantized_state(out_dir: Path, device: str) -> dict:
    """The output's tensors with every packed Linear as its fp32 weight [out, in]."""
    import torch
    from safetensors.torch import load_file

    q = json.loads((out_dir / "config.json").read_text())["quantization_config"]
    bits, group = q["bits"], q["group_size"]
    if 32 % bits:
        sys.exit(f"{out_dir}: {bits}-bit packing is not read here")
    gptq_zero = q.get("packing_format", "auto_round:auto_gptq") in ("auto_round:auto_gptq", "auto_gptq")
    state = {}
    for f in sorted(out_dir.glob("*.safetensors")):
        state.update(load_file(str(f), device=device))
    dense = {}
    for k, v in state.items():
        if k.endswith(".qweight"):
            p = k[:-len(".qweight")]
            codes = unpack(v, bits, 0).float()                                   # [in, out]
            zeros = unpack(state[p + ".qzeros"], bits, 1).float() + (1.0 if gptq_zero else 0.0)  # [groups, out]
            g = torch.arange(codes.shape[0], device=v.device) // (group if group > 0 else codes.shape[0])
            dense[p + ".weight"] = (state[p + ".scales"].float()[g] * (codes - zeros[g])).t().contiguous()
        elif not k.endswith((".qzeros", ".scales", ".g_idx")):
            dense[k] = v.float()
    return dense


def score(model_dir: Path, outs: dict, eval_ids: list[int], bos: int, ctx: int, device: str) -> dict:
    """KL(FP || each output) and top-1 agreement over each window's second half, as `autoround eval` scores."""
    import torch
    from transformers import LlamaForCausalLM

    windows = len(eval_ids) // ctx
    ids = torch.tensor(eval_ids[:windows * ctx], device=device).view(windows, ctx)
    ids[:, 0] = bos
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
    first = ctx // 2
    with torch.no_grad():
        ref = [torch.log_softmax(model(ids[w:w + 1]).logits[0, first:ctx - 1].float(), -1) for w in range(windows)]
        res = {}
        for name, out in outs.items():
            missing, unexpected = model.load_state_dict(dequantized_state(out, device), strict=False)
            if missing or unexpected:
                sys.exit(f"{out}: state dict mismatch: missing {missing[:4]}, unexpected {unexpected[:4]}")
            kl, agree, n = 0.0, 0, 0
            for w in range(windows):
                lq = torch.log_softmax(model(ids[w:w + 1]).logits[0, first:ctx - 1].float(), -1)
                lp = ref[w]
                kl += float((lp.exp() * (lp - lq)).sum(-1).double().sum())
                agree += int((lp.argmax(-1) == lq.argmax(-1)).sum())
                n += lp.shape[0]
            res[name] = {"kl_mean": kl / n, "top1_agreement": agree / n, "tokens_scored": n}
    return res


# ----------------------------------------------------------------------------------------------------------------

def main():
    a = parse_args()
    if a._worker:
        return worker(a)
    if not a.autoround or not a.fixtures:
        sys.exit("--autoround and --fixtures are required")
    fx, work = Path(a.fixtures), Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    wiki = next(iter(sorted(fx.glob("wiki.test.raw*"))), None)
    story = next(iter(sorted(fx.glob("tinystories*.txt"))), None)
    if wiki is None or story is None or not (fx / "llama2-spm/tokenizer.json").exists():
        sys.exit(f"{fx}: needs llama2-spm/tokenizer.json, wiki.test.raw[.xz] and tinystories*.txt")
    model = work / f"llama-{a.layers}x{a.hidden}-i{a.intermediate}-a{a.heads}-kv{a.kv_heads}"
    t0 = time.perf_counter()
    make_model(a, model, fx / "llama2-spm")
    jsonl, ids_file = calibration(a, model, wiki, work)
    print(f"model {model.name} and {a.nsamples} x {a.seqlen} calibration ids in {time.perf_counter() - t0:.0f} s",
          flush=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TORCHINDUCTOR_CACHE_DIR=str(work / "inductor"), PYTHONUNBUFFERED="1")
    ours_out, ar_out = work / "ours", work / "autoround"
    ours_cmd = [a.autoround, "quantize", "--model", str(model), "--dataset", f"{jsonl}:field=input_ids",
                "--nsamples", str(a.nsamples), "--seqlen", str(a.seqlen), "--batch_size", str(a.batch_size),
                "--iters", str(a.iters), "--bits", "4", "--group_size", "128", "--format", "auto_round",
                "--device", a.device, "--output_dir", str(ours_out), "--overwrite"] + a.ours_args.split()
    runs = {"autoround.cpp": run_tool("autoround.cpp", ours_cmd, work / "ours.log", a.device)}
    shutil.rmtree(ar_out, ignore_errors=True)
    ar_cmd = [sys.executable, os.path.abspath(__file__), "--_worker", "--model_dir", str(model), "--ids_file",
              str(ids_file), "--out", str(ar_out), "--iters", str(a.iters), "--seqlen", str(a.seqlen),
              "--batch_size", str(a.batch_size), "--device", a.device]
    runs["AutoRound"] = run_tool("AutoRound", ar_cmd, work / "autoround.log", a.device, env)
    tagged = [l for l in (work / "autoround.log").read_text(errors="replace").splitlines() if l.startswith(TAG)]
    if tagged:
        runs["AutoRound"].update(json.loads(tagged[-1][len(TAG):]))
    outs = {"autoround.cpp": ours_out} if runs["autoround.cpp"]["rc"] == 0 else {}
    if runs["AutoRound"]["rc"] == 0 and tagged:
        outs["AutoRound"] = Path(runs["AutoRound"]["dir"])
        for f in TOKENIZER_FILES:  # auto-round re-saves the tokenizer in another form: `autoround eval` reads the model's
            if (model / f).exists():
                shutil.copyfile(model / f, outs["AutoRound"] / f)
    eval_text = work / "eval.txt"
    eval_text.write_bytes(story.read_bytes()[:a.eval_bytes])
    eval_ids, bos = tokenize(model, read_text(eval_text))
    quality = score(model, outs, [bos] + eval_ids, bos, a.eval_ctx, a.device) if outs else {}  # BOS first, as ours
    for name, out in outs.items() if a.check_eval else ():
        r = subprocess.run([a.autoround, "eval", "--model", str(out), "--ref-model", str(model), "--text", str(eval_text),
                            "--ctx", str(a.eval_ctx), "--json"], capture_output=True, text=True)
        quality[name]["autoround_eval"] = json.loads(r.stdout) if r.returncode == 0 else r.stderr.strip()[-300:]
    summary = {"device": a.device, "model": model.name, "layers": a.layers, "iters": a.iters,
               "calibration": f"{a.nsamples} x {a.seqlen}", "runs": runs, "quality": quality}
    o, r = runs["autoround.cpp"], runs["AutoRound"]
    if o["rc"] == 0 and r["rc"] == 0:
        summary["wall_ratio_autoround_over_ours"] = round(r["wall_s"] / o["wall_s"], 3)
    print("| tool | wall s | peak device MiB | peak RSS MiB | KL mean | top-1 |")
    print("|---|---|---|---|---|---|")
    for name, run in runs.items():
        q = quality.get(name, {})
        kl = f"{q['kl_mean']:.5f}" if q else "failed"
        top1 = f"{q['top1_agreement']:.4f}" if q else ""
        print(f"| {name} | {run['wall_s']:.1f} | {run['peak_device_mib']} | {run['peak_rss_mib']} | {kl} | {top1} |")
    print(json.dumps(summary))
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=1))
    return 0 if len(outs) == 2 else 1


if __name__ == "__main__":
    sys.exit(main())
