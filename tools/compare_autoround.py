#!/usr/bin/env python3
"""Wall time and peak RSS of Intel's AutoRound (Python, CPU) against autoround.cpp on one model.

Not part of the test suite. Both tools quantize the same randomly initialised Llama model
(W4G128, symmetric, auto_round format) with the same calibration token ids; the runs are
interleaved (--reps rounds of [autoround.cpp, auto-round]) and each one is a separate process
started under `/usr/bin/time -v`, which gives its peak RSS. The script prints the machine
(nproc, load average at start and end), the versions (torch, transformers, auto-round, the
autoround.cpp commit), a Markdown table and one JSON summary line.

Setup (a virtual environment outside the repository; the CLI must already be built):

    python3 -m venv /tmp/arvenv
    /tmp/arvenv/bin/pip install torch transformers auto-round sentencepiece tokenizers

(tested with torch 2.15, transformers 5.24, auto-round 0.16.1 on the CPU).

The configuration of the issue (hidden 2048, intermediate 8192, 2 layers, 32 heads / 8 KV heads,
head_dim 64, W4G128, 20 iters, 16 x 512 tokens, batch 8; about 10 minutes on a small machine):

    /tmp/arvenv/bin/python tools/compare_autoround.py --hidden 2048 --intermediate 8192 \\
        --layers 2 --heads 32 --kv_heads 8 --iters 20 --nsamples 16 --seqlen 512 \\
        --batch_size 8 --reps 2

(these are also the defaults). A quick smoke test (a minute or two):

    /tmp/arvenv/bin/python tools/compare_autoround.py --hidden 256 --intermediate 512 \\
        --layers 2 --heads 4 --kv_heads 2 --iters 2 --nsamples 4 --seqlen 64 --reps 1

Extra flags for autoround.cpp go through --ours_args (e.g. --ours_args "--amp false"; write
--ours_args=--flag for a single flag without a value), extra
keyword arguments for AutoRound(...) through --ar_kwargs as JSON (e.g.
--ar_kwargs '{"enable_torch_compile": false}'); both are recorded in the output.

What is generated (once; cached under --work, default /tmp/ar_compare):
  * MODEL: LlamaForCausalLM(LlamaConfig(...)) with transformers' random initialisation under
    torch.manual_seed(--seed), rope_theta 500000, untied lm_head, cast to bfloat16 and written
    with save_pretrained (safetensors). The tokenizer files of --tokenizer (default: the
    Llama-2 SentencePiece tokenizer of /work/shared/fixtures/tokenizers/llama2-spm) are copied
    beside it, and vocab_size is the tokenizer's size.
  * CALIBRATION: --nsamples documents cut from --text (default: WikiText-2 raw test split) at
    line boundaries, each the shortest run of lines that tokenizes (HF tokenizer, with the BOS it
    adds) to MORE than --seqlen tokens and passes AutoRound's repeat filter (the last token of the
    first seqlen ids occurs at most seqlen/2 times in them).
      - autoround.cpp gets them as JSONL ({"text": ...} per line) through --dataset; its loader
        (src/quant/calib.cpp) tokenizes each document with the model's special tokens (BOS),
        keeps documents of at least seqlen tokens, truncates each to its first seqlen ids, and
        with exactly nsamples usable documents keeps all of them: one sample per document.
        It shuffles their order (seeded); the SET of samples is the same as auto-round's.
      - auto-round gets `dataset=[LongTensor[1, seqlen], ...]`: the first seqlen HF ids of each
        document. In auto-round 0.16.1 (auto_round/calibration/llm.py, calib()) a non-string
        dataset is iterated as is; a tensor element is fed straight to model(ids, attention_mask=...)
        as one batch, so it must be 2-D [batch, seqlen] (the code indexes [:, -1] and splits on
        dim 0); it is NOT truncated (longer rows are kept as they are) and shorter ones are
        skipped. For non-string datasets it builds an attention mask of ones with the last
        position (and any trailing run of the last token, as the tokenizer has no pad token)
        zeroed; the string (pile-10k) path passes no mask. The last position is excluded from the
        loss either way.

What is verified and what is assumed:
  * Verified each run: our tokenizer gives the same ids as HF's for the first --verify_docs
    documents (whole documents, BOS included), through `autoround logits`, which writes the ids
    it fed to the model to OUT.ids. Our ids for the other documents are assumed to match too.
  * Verified each run: both output directories hold a quantized model (safetensors files and a
    quantization_config in config.json), and neither tool reported fewer than nsamples samples
    (autoround.cpp: "nsamples reduced"; auto-round: "insufficient number of samples").
  * Not verified: that both tools use the same sample order or random batch draws, or that they
    produce the same weights; this script compares cost, not results.

Defaults of auto-round 0.16.1 on the CPU (left alone here; recorded by the worker):
  * amp: AutoRound(amp=True) by default (compressors/base.py: `amp = kwargs.pop("amp", True)`);
    context/model.py _set_amp_dtype() then picks bfloat16 on the CPU (CpuARDevice prefers bf16)
    when CpuInfo().bf16 (CPUID leaf 7 sub-leaf 1, EAX bit 5: AVX512_BF16) is set, else it turns
    amp off and tunes in float32. With amp the model is cast to bf16 and block forwards run
    under torch.autocast("cpu", bfloat16) (algorithms/quantization/sign_round/quantizer.py).
  * torch.compile: enable_torch_compile=None resolves to default_enable_torch_compile(), which is
    True on any platform but win32 (utils/device_manager.py), and is then reset to False for
    iters < MIN_ITERS_FOR_TORCH_COMPILE = 10 on dense models (compressors/base.py,
    _torch_compile_disabled_reason). So the issue's run (20 iters) compiles, the smoke test
    (2 iters) does not. Inductor's cache lives in --work/inductor_cache/<configuration>, kept
    across reps and invocations, so the first auto-round run of a configuration compiles cold
    (the smoke-test model at 10 iters on 2 cores: 74 s cold, 28 s warm) and later ones hit the cache; each
    run is marked cold/warm in the output. Run once with --reps 1 first to compare warm runs
    only, or pass --inductor_cache fresh to give every run an empty cache (all cold).
  * threads: torch's default intra-op pool (torch.get_num_threads(), recorded); autoround.cpp
    uses all cores by default.

Wall time is the whole process (start, model load, calibration, tuning, packing, saving) as
seen from here; peak RSS is /usr/bin/time's "Maximum resident set size" of the process (for
auto-round this excludes inductor's compile-worker subprocesses).
"""
import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path("/work/shared/fixtures")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "added_tokens.json", "vocab.json", "merges.txt")
WORKER_TAG = "AR_WORKER_RESULT "


# --------------------------------------------------------------------------------------------
# Model and calibration data
# --------------------------------------------------------------------------------------------

def model_params(a):
    return {"hidden": a.hidden, "intermediate": a.intermediate, "layers": a.layers,
            "heads": a.heads, "kv_heads": a.kv_heads, "rope_theta": a.rope_theta,
            "tokenizer": str(Path(a.tokenizer).resolve()), "seed": a.seed}


def ensure_model(a, work):
    """The generated model directory; built once per configuration (a STAMP file marks it done)."""
    p = model_params(a)
    tag = (f"llama-h{a.hidden}-i{a.intermediate}-l{a.layers}-a{a.heads}-kv{a.kv_heads}"
           f"-{Path(a.tokenizer).name}-s{a.seed}")
    d = work / tag
    stamp = d / "GENERATED.json"
    if stamp.exists() and json.loads(stamp.read_text()) == p:
        return d
    if a.hidden % a.heads or a.heads % a.kv_heads:
        sys.exit("--hidden must be a multiple of --heads, and --heads of --kv_heads")
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    print(f"generating {d} ...", flush=True)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for f in TOKENIZER_FILES:
        if (Path(a.tokenizer) / f).exists():
            shutil.copyfile(Path(a.tokenizer) / f, d / f)
    tok = AutoTokenizer.from_pretrained(d)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=a.hidden, intermediate_size=a.intermediate,
        num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        head_dim=a.hidden // a.heads, rope_theta=a.rope_theta,
        max_position_embeddings=max(4096, a.seqlen), tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, dtype=torch.bfloat16)
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    model.save_pretrained(d, safe_serialization=True)
    del model
    stamp.write_text(json.dumps(p, indent=1))
    return d


def repetitive(ids):
    """AutoRound's repeat filter, as in src/quant/calib.cpp: last token occurs > len/2 times."""
    return sum(t == ids[-1] for t in ids) > len(ids) // 2


def build_calibration(a, work, model_dir):
    """Writes CALIB.jsonl (for autoround.cpp) and CALIB.ids.json (for auto-round); cached."""
    from transformers import AutoTokenizer

    stem = f"calib-{Path(a.text).name.replace('.', '_')}-{model_dir.name}-n{a.nsamples}-L{a.seqlen}"
    jsonl, ids_file = work / (stem + ".jsonl"), work / (stem + ".ids.json")
    if jsonl.exists() and ids_file.exists():
        docs = [json.loads(l)["text"] for l in jsonl.read_text(encoding="utf-8").splitlines()]
        return jsonl, ids_file, docs, json.loads(ids_file.read_text())["full_ids"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    lines = Path(a.text).read_text(encoding="utf-8").splitlines(keepends=True)
    docs, full_ids, cur, est = [], [], [], 0
    for line in lines:
        if not cur and not line.strip():
            continue  # a document starts with text
        cur.append(line)
        est += len(tok(line, add_special_tokens=False)["input_ids"])
        if est <= a.seqlen:
            continue
        doc = "".join(cur).strip()
        ids = tok(doc)["input_ids"]  # with the BOS the tokenizer adds
        if len(ids) <= a.seqlen:
            continue  # the per-line estimate was high: take more lines
        cur, est = [], 0
        if repetitive(ids[:a.seqlen]):
            continue
        docs.append(doc)
        full_ids.append(ids)
        if len(docs) == a.nsamples:
            break
    if len(docs) < a.nsamples:
        sys.exit(f"{a.text}: only {len(docs)} documents of more than {a.seqlen} tokens")
    with open(jsonl, "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
    ids_file.write_text(json.dumps({"seqlen": a.seqlen, "samples": [i[:a.seqlen] for i in full_ids],
                                    "full_ids": full_ids}))
    return jsonl, ids_file, docs, full_ids


def verify_tokenizer(a, work, model_dir, docs, full_ids):
    """Our ids (from `autoround logits ... OUT.ids`) must equal HF's for the first documents."""
    n = min(a.verify_docs, len(docs))
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        for i in range(n):
            out = Path(tmp) / f"doc{i}.logits"
            r = subprocess.run([a.autoround, "logits", "--model", str(model_dir), "--text", docs[i],
                                "--out", str(out)], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"autoround logits failed:\n{r.stdout}\n{r.stderr}")
            ours = [int(t) for t in (Path(str(out) + ".ids")).read_text().split()]
            out.unlink()
            if ours != full_ids[i]:
                k = next((j for j, (x, y) in enumerate(zip(ours, full_ids[i])) if x != y),
                         min(len(ours), len(full_ids[i])))
                sys.exit(f"tokenizer mismatch in document {i} at token {k}: ours {ours[k:k + 8]} "
                         f"HF {full_ids[i][k:k + 8]} (lengths {len(ours)} / {len(full_ids[i])})")
    return n


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------

def parse_time_v(path):
    """Peak RSS (KiB), wall and exit status from a `/usr/bin/time -v -o FILE` report."""
    text = Path(path).read_text()
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    st = re.search(r"Exit status: (\d+)", text)
    return rss, int(st.group(1)) if st else None, text


def timed(cmd, log, env=None):
    """Runs cmd under /usr/bin/time -v; returns (wall_s, peak_rss_kib, stdout)."""
    tv = log.with_suffix(".time")
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v", "-o", str(tv)] + cmd, capture_output=True,
                       text=True, env=env)
    wall = time.perf_counter() - t0
    log.write_text(f"$ {shlex.join(cmd)}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
    if r.returncode:
        tail = "\n".join((r.stdout + r.stderr).splitlines()[-30:])
        sys.exit(f"run failed (exit {r.returncode}, log {log}):\n{tail}")
    rss, _, _ = parse_time_v(tv)
    return wall, rss, r.stdout + r.stderr


def check_output(d, tool):
    """A quantized model: safetensors files and a quantization_config in config.json."""
    cfg = json.loads((d / "config.json").read_text())
    st = sorted(p.name for p in d.glob("*.safetensors"))
    qc = cfg.get("quantization_config")
    if not st or not qc:
        sys.exit(f"{tool}: {d} holds no quantized model (safetensors {st}, quantization_config {qc})")
    if tool == "ours" and "model.safetensors" not in st:
        sys.exit(f"ours: {d} has no model.safetensors ({st})")
    keys = ("quant_method", "bits", "group_size", "sym", "packing_format", "iters", "nsamples", "seqlen")
    return {"safetensors": st, "quantization_config": {k: qc[k] for k in keys if k in qc}}


def run_ours(a, model_dir, jsonl, out, log):
    cmd = [a.autoround, "quantize", "--model", str(model_dir), "--bits", "4", "--group_size", str(a.group_size),
           "--iters", str(a.iters), "--nsamples", str(a.nsamples), "--seqlen", str(a.seqlen),
           "--batch_size", str(a.batch_size), "--dataset", str(jsonl), "--output_dir", str(out),
           "--overwrite"] + shlex.split(a.ours_args)
    wall, rss, text = timed(cmd, log)
    if re.search(r"usable samples|nsamples reduced", text):
        sys.exit(f"ours used fewer than {a.nsamples} samples (log {log})")
    return {"wall_s": wall, "peak_rss_kib": rss, "cmd": shlex.join(cmd), "output": check_output(out, "ours")}


def run_autoround(a, model_dir, ids_file, out, log, cache):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [a.python, str(Path(__file__).resolve()), "--_worker", "--model_dir", str(model_dir),
           "--ids_file", str(ids_file), "--out", str(out), "--iters", str(a.iters),
           "--nsamples", str(a.nsamples), "--seqlen", str(a.seqlen), "--batch_size", str(a.batch_size),
           "--group_size", str(a.group_size), "--ar_kwargs", a.ar_kwargs]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TORCHINDUCTOR_CACHE_DIR=str(cache))
    wall, rss, text = timed(cmd, log, env)
    res = [l for l in text.splitlines() if l.startswith(WORKER_TAG)]
    if not res:
        sys.exit(f"auto-round worker printed no result (log {log})")
    w = json.loads(res[-1][len(WORKER_TAG):])
    if re.search(r"insufficient number of samples|force the batch size", text):
        sys.exit(f"auto-round used fewer than {a.nsamples} samples (log {log})")
    # auto-round saves into OUT/<model name>-w4g<group>/; quantize_and_save returns that folder
    return {"wall_s": wall, "peak_rss_kib": rss, "worker": w,
            "output": check_output(Path(w["output_dirs"][0]), "autoround")}


def worker(a):
    """Runs inside the auto-round subprocess: AutoRound(...) with its CPU defaults, then saves."""
    t0 = time.perf_counter()
    import torch
    import auto_round
    from auto_round import AutoRound

    samples = json.loads(Path(a.ids_file).read_text())["samples"]
    dataset = [torch.tensor([s], dtype=torch.long) for s in samples]  # [1, seqlen] each
    kwargs = dict(bits=4, group_size=a.group_size, sym=True, iters=a.iters, nsamples=a.nsamples,
                  seqlen=a.seqlen, batch_size=a.batch_size, dataset=dataset, device_map="cpu")
    kwargs.update(json.loads(a.ar_kwargs))
    t1 = time.perf_counter()
    ar = AutoRound(a.model_dir, **kwargs)  # the model path: auto-round loads model and tokenizer
    t2 = time.perf_counter()
    _, folders = ar.quantize_and_save(output_dir=a.out, format="auto_round")
    t3 = time.perf_counter()
    mc = getattr(ar, "model_context", None)
    info = {
        "torch": torch.__version__, "auto_round": auto_round.__version__,
        "torch_num_threads": torch.get_num_threads(),
        "amp": getattr(mc, "amp", None), "amp_dtype": str(getattr(mc, "amp_dtype", None)),
        "enable_torch_compile": getattr(ar, "enable_torch_compile", None),
        "batch_size": getattr(getattr(ar, "calibration_context", None), "batch_size", None),
        "import_s": round(t1 - t0, 3), "init_s": round(t2 - t1, 3),
        "quantize_and_save_s": round(t3 - t2, 3),
        "kwargs": {k: v for k, v in kwargs.items() if k != "dataset"},
        "output_dirs": [str(f) for f in (folders if isinstance(folders, (list, tuple)) else [folders])],
    }
    print(WORKER_TAG + json.dumps(info), flush=True)


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def sh(cmd, cwd=None):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd).stdout.strip()
    except OSError:
        return ""


def git_commit():
    c = sh(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO)
    dirty = sh(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO)
    return c + ("+dirty" if dirty else "")


def summarize(runs):
    w = [r["wall_s"] for r in runs]
    return {"wall_median_s": statistics.median(w), "wall_min_s": min(w), "wall_max_s": max(w),
            "peak_rss_mib": max(r["peak_rss_kib"] for r in runs) / 1024, "walls_s": w,
            "peak_rss_mib_each": [r["peak_rss_kib"] / 1024 for r in runs]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/ar_compare", help="cache and output directory")
    ap.add_argument("--autoround", default=str(REPO / "build/src/cli/autoround"))
    ap.add_argument("--python", default=sys.executable, help="interpreter with auto-round")
    ap.add_argument("--tokenizer", default=str(FIXTURES / "tokenizers/llama2-spm"))
    ap.add_argument("--text", default=str(FIXTURES / "text/wikitext-2-raw/wiki.test.raw"))
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv_heads", type=int, default=8)
    ap.add_argument("--rope_theta", type=float, default=500000.0)
    ap.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--nsamples", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=512)
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--group_size", type=int, default=128, help="for both tools")
    ap.add_argument("--reps", type=int, default=2, help="rounds of [ours, autoround]")
    ap.add_argument("--ours_args", default="", help="extra autoround.cpp flags, e.g. '--amp false'")
    ap.add_argument("--ar_kwargs", default="{}", help="extra AutoRound(...) kwargs as JSON")
    ap.add_argument("--verify_docs", type=int, default=2, help="documents whose ids are compared")
    ap.add_argument("--inductor_cache", choices=("shared", "fresh"), default="shared")
    # worker mode (internal)
    ap.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model_dir", help=argparse.SUPPRESS)
    ap.add_argument("--ids_file", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._worker:
        return worker(a)
    json.loads(a.ar_kwargs)  # fail early on bad JSON

    work = Path(a.work).resolve()
    (work / "logs").mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    import torch
    import transformers

    ar_version = sh([a.python, "-c", "import importlib.metadata as m; print(m.version('auto-round'))"])
    env = {"nproc": int(sh(["nproc"]) or 0), "cpu": platform.processor() or platform.machine(),
           "loadavg_start": load_start, "torch": torch.__version__,
           "transformers": transformers.__version__, "auto_round": ar_version,
           "autoround_cpp_commit": git_commit(), "autoround_binary": a.autoround,
           "binary_mtime": time.strftime("%Y-%m-%d %H:%M:%S",
                                         time.localtime(os.path.getmtime(a.autoround)))}
    print(f"nproc {env['nproc']}, load average at start {load_start}")
    print(f"torch {env['torch']}, transformers {env['transformers']}, auto-round {ar_version}, "
          f"autoround.cpp {env['autoround_cpp_commit']} (binary built {env['binary_mtime']})")

    model_dir = ensure_model(a, work)
    jsonl, ids_file, docs, full_ids = build_calibration(a, work, model_dir)
    del torch, transformers
    nver = verify_tokenizer(a, work, model_dir, docs, full_ids)
    print(f"model {model_dir}\ncalibration {jsonl} ({len(docs)} documents, "
          f"{min(map(len, full_ids))}..{max(map(len, full_ids))} tokens with BOS); "
          f"our ids == HF ids for the first {nver} documents")

    runs = {"ours": [], "autoround": []}
    for r in range(a.reps):
        res = run_ours(a, model_dir, jsonl, work / "out" / "ours", work / "logs" / f"ours-{r}.log")
        runs["ours"].append(res)
        print(f"rep {r}: autoround.cpp {res['wall_s']:.2f} s, {res['peak_rss_kib'] / 1024:.0f} MiB", flush=True)
        cache = work / "inductor_cache" / f"{model_dir.name}-i{a.iters}-n{a.nsamples}-L{a.seqlen}-b{a.batch_size}"
        if a.inductor_cache == "fresh":
            cache = Path(tempfile.mkdtemp(prefix="inductor-", dir=work))
        cache.mkdir(parents=True, exist_ok=True)
        warm = any(cache.iterdir())
        res = run_autoround(a, model_dir, ids_file, work / "out" / "autoround", work / "logs" / f"autoround-{r}.log", cache)
        if a.inductor_cache == "fresh":
            shutil.rmtree(cache, ignore_errors=True)
        res["inductor_cache"] = "warm" if warm else "cold"
        runs["autoround"].append(res)
        w = res["worker"]
        print(f"rep {r}: auto-round    {res['wall_s']:.2f} s, {res['peak_rss_kib'] / 1024:.0f} MiB "
              f"(threads {w['torch_num_threads']}, amp {w['amp']} {w['amp_dtype']}, "
              f"torch.compile {w['enable_torch_compile']}"
              + (f" with a {res['inductor_cache']} cache" if w["enable_torch_compile"] else "")
              + f", quantize_and_save {w['quantize_and_save_s']} s)",
              flush=True)
    env["loadavg_end"] = os.getloadavg()

    s = {k: summarize(v) for k, v in runs.items()}
    ratio = s["autoround"]["wall_median_s"] / s["ours"]["wall_median_s"]
    aw = runs["autoround"][-1]["worker"]
    print(f"\nload average at end {env['loadavg_end']}\n")
    print(f"W4G{a.group_size} sym, {a.iters} iters, {a.nsamples} x {a.seqlen} tokens, batch {a.batch_size}; "
          f"model h{a.hidden} i{a.intermediate} L{a.layers} heads {a.heads}/{a.kv_heads}; "
          f"{a.reps} reps, nproc {env['nproc']}\n")
    print("| run | wall (median, min-max) | peak RSS |")
    print("| --- | --- | --- |")
    names = {"ours": f"autoround.cpp {env['autoround_cpp_commit']}"
                     + (f" `{a.ours_args}`" if a.ours_args else ""),
             "autoround": f"auto-round {ar_version} (amp {aw['amp']}, {aw['amp_dtype']}, "
                          f"compile {aw['enable_torch_compile']}"
                          + (f" [{', '.join(r['inductor_cache'] for r in runs['autoround'])}]"
                             if aw["enable_torch_compile"] else "")
                          + f", {aw['torch_num_threads']} threads)"
                          + (f" `{a.ar_kwargs}`" if a.ar_kwargs != "{}" else "")}
    for k in ("ours", "autoround"):
        x = s[k]
        print(f"| {names[k]} | {x['wall_median_s']:.2f} s ({x['wall_min_s']:.2f}-{x['wall_max_s']:.2f}) "
              f"| {x['peak_rss_mib']:.0f} MiB |")
    print(f"\nauto-round / autoround.cpp wall (medians): {ratio:.2f}x\n")
    summary = {"ratio_autoround_over_ours": round(ratio, 3), "env": env,
               "config": {k: getattr(a, k) for k in ("hidden", "intermediate", "layers", "heads",
                          "kv_heads", "rope_theta", "seed", "iters", "nsamples", "seqlen",
                          "batch_size", "reps", "ours_args", "ar_kwargs", "inductor_cache")},
               "model_dir": str(model_dir), "calibration": str(jsonl),
               "ours": {**s["ours"], "cmd": runs["ours"][-1]["cmd"], "output": runs["ours"][-1]["output"]},
               "autoround": {**s["autoround"], "worker": [r["worker"] for r in runs["autoround"]],
                             "inductor_cache": [r["inductor_cache"] for r in runs["autoround"]],
                             "output": runs["autoround"][-1]["output"]}}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
