#!/usr/bin/env python3
"""Does every output autoround.cpp writes load and run in its target runtime? (issue 11, item 5)

Not part of the test suite. Needs a virtual environment outside the repository with torch,
transformers, auto-round, safetensors (+ optimum and gptqmodel for the GPTQ / AWQ rows:
transformers 5 loads GPTQ through optimum + gptqmodel and AWQ through gptqmodel; autoawq is not
used by it any more). Measured with torch 2.15.0, transformers 5.24.0, auto-round 0.16.1,
optimum 2.3.0, gptqmodel 7.7.0 (CPU wheels, `BUILD_CUDA_EXT=0 pip install optimum gptqmodel`).
The CLI must already be built. Exact command (from the repository root; about 2.5 minutes on
2 cores, almost all of it Python start-up of the per-output load processes):

    /work/arvenv/bin/python tools/check_loadability.py --autoround build/src/cli/autoround \\
        --work /tmp/loadability

What it does:
  1. MODEL: a random Llama with SmolLM-135M's widths: hidden 576, 9 heads of 64, 3 KV heads,
     intermediate 1536, 2 layers, vocab 512, untied lm_head, transformers' init (normal std 0.05)
     under torch.manual_seed(0), bfloat16, save_pretrained; the tokenizer of
     tests/data/autoround_golden/tokenizer/ (512 tokens) is copied beside it.
     (build/bench/stream_bench cannot make it: it hard-codes 32 heads / 8 KV heads.)
  2. QUANTIZE with our CLI, W4 G128 RTN (`--iters 0 --nsamples 8 --seqlen 128`), for
     auto_round, auto_gptq, auto_awq, fake, each sym (default) and --asym, and once with
     `--format auto_round,auto_gptq,auto_awq` (subdirectories auto-round/, auto-gptq/, auto-awq/,
     whose model.safetensors are compared with the single-format runs). The CLI's
     "quantized Linears:" and "kept in 16 bit:" log lines are printed.
  3. For every output:
       ours   `autoround logits --model O --text TEXT --out F` (fp32 [tokens, vocab] + F.ids);
       dense  the packed tensors dequantized in Python (tools/compat_transformers.py's unpackers,
              independent of the C++ loader) into a plain LlamaForCausalLM in float32, run on the
              same ids: max |diff| against ours must be <= 1e-3 * max(1, max |logit|);
       native AutoModelForCausalLM.from_pretrained(O, dtype=--dtype, device_map="cpu",
              output_loading_info=True) in a separate process (gptqmodel patches transformers on
              import; a crash must not end the table), through transformers' own quantizer
              integration; the row names the Linear class that replaced the quantized layers
              (the backend actually used). A load with missing (newly initialised) weights is a
              failure even if it runs. max |diff| against ours must be <= --rtol * max |logit|
              (default 2e-2: the CPU kernels dequantize to fp16/bf16 and may compute in them;
              auto-round's post_init (inference/convert_model.py) casts the WHOLE model to
              float16 when its backend (torch_zp) does not list the requested dtype, so the
              auto_round rows run in fp16 whatever --dtype says: the table shows the model's
              dtype after loading next to the backend). With --dtype bfloat16 the default tolerance
              is 5e-2: a plain nn.Linear model (our fake output without quantization_config) run
              in bf16 differs from our fp32 logits by 2.0e-2 of max |logit|.
  4. AutoRound's own output of the same model for comparison: AutoRound(MODEL, scheme="W4A16",
     group_size=128, iters=0, nsamples=8, seqlen=128, dataset=<8 x 128 ids of README.md>)
     .quantize_and_save(dir, format=F) for F in auto_round, auto_gptq, auto_awq; each one is
     then read by our `autoround logits` and loaded natively as above.
  5. Diagnostics (--no-patched to skip): copies of our outputs with the one config change
     that makes them load, to show what the writer should emit:
       auto_gptq + "modules_in_block_to_quantize" (what AutoRound's GPTQ exporter writes when
         some block Linears stay in 16 bit; optimum's GPTQQuantizer.convert_model honours it and
         ignores gptqmodel's "dynamic", so without it every block Linear becomes a QuantLinear
         and gptqmodel refuses in_features 576 % 128 != 0);
       fake without "quantization_config" (AutoRound's FakeFormat deletes it for weight-only
         schemes; with packing_format auto_round:fake, auto-round 0.16.1 routes every Linear to
         its FakeActQuantLinear, whose forward fails on act_data_type None).
  6. A table: output | quantized / kept | dense | native load | backend | max|diff| / max|logit|
     | argmax agreement | verdict.

With --layer_config TEXT (e.g. '{"mlp.down_proj": {"bits": 8}, "layers.1.self_attn.q_proj":
{"group_size": 64, "sym": false}, "layers.0.mlp.up_proj": "BF16"}'): only our auto_round, auto_gptq and
fake outputs made with it, and AutoRound's auto_round and auto_gptq with the same layer_config
(parse_layer_config_arg of the text), are checked; the dense check reads each Linear's own bits and
group size from extra_config (exact names) or gptq's dynamic (+: patterns, matched from the start).

Exit status 0 when every row of our own (unpatched) outputs passes, 1 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER_DIR = os.path.join(REPO, "tests", "data", "autoround_golden", "tokenizer")
DEFAULT_TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside "
                "in the park with her friends.")
QUANT_ARGS = ["--bits", "4", "--group_size", "128", "--iters", "0", "--nsamples", "8", "--seqlen", "128"]
# Without --group_size the scheme's default (128) is lowered to 64 for this 576-wide model, so every
# Linear is quantized in whole groups (the "default group" rows).
QUANT_ARGS_DEFAULT_GROUP = ["--bits", "4", "--iters", "0", "--nsamples", "8", "--seqlen", "128"]
DENSE_RTOL = 1e-3
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def log(msg=""):
    print(msg, flush=True)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ------------------------------------------------------------------------------------------------
# 1. model
# ------------------------------------------------------------------------------------------------

def make_model(d):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    cfg = LlamaConfig(hidden_size=576, num_hidden_layers=2, num_attention_heads=9, num_key_value_heads=3,
                      head_dim=64, intermediate_size=1536, vocab_size=512, max_position_embeddings=512,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                      initializer_range=0.05)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_DIR, f), d)
    log(f"model: {d} (hidden 576, 9x64 heads / 3 KV heads, intermediate 1536, 2 layers, vocab 512, bf16)")


# ------------------------------------------------------------------------------------------------
# 2. our CLI
# ------------------------------------------------------------------------------------------------

def quantize_ours(autoround, model, out, fmt, asym, default_group=False, layer_config=None):
    cmd = [autoround, "--model", model, "--output_dir", out, "--format", fmt]
    cmd += QUANT_ARGS_DEFAULT_GROUP if default_group else QUANT_ARGS
    cmd += ["--asym"] if asym else []
    cmd += ["--layer_config", layer_config] if layer_config else []
    cmd += ["--threads", "1", "--overwrite"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    text = r.stdout + r.stderr
    lines = [ln for ln in text.splitlines()
             if "quantized Linears:" in ln or "kept in 16 bit:" in ln or "own formats:" in ln]
    shown = " ".join(c if " " not in c else repr(c) for c in cmd)
    return {"cmd": shown, "rc": r.returncode, "lines": lines, "log_tail": text[-2000:]}


def our_logits(autoround, model_dir, text, out):
    r = subprocess.run([autoround, "logits", "--model", model_dir, "--text", text, "--out", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, None, (r.stdout + r.stderr).strip().splitlines()[-1:] or ["rc %d" % r.returncode]
    import numpy as np

    ids = [int(x) for x in open(out + ".ids").read().split()]
    logits = np.fromfile(out, dtype=np.float32)
    return ids, logits.reshape(len(ids), -1), None


def count_layers(model_dir):
    """(quantized, kept in 16 bit) block Linears of an output directory, from its tensors."""
    from safetensors import safe_open

    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    q = cfg.get("quantization_config")
    packed, dense = set(), set()
    for f in os.listdir(model_dir):
        if not f.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(model_dir, f), "pt") as st:
            for k in st.keys():
                m = re.match(r"(model\.layers\.\d+\.(?:self_attn|mlp)\.\w+)\.(qweight|weight)$", k)
                if m:
                    (packed if m.group(2) == "qweight" else dense).add(m.group(1))
    if packed:
        return len(packed), len(dense)
    if q is None:
        return None, len(dense)  # a plain dense model: nothing declared quantized
    fp = {k for k, v in (q.get("extra_config") or {}).items() if v.get("bits", 16) >= 16}
    return len(dense - fp), len(fp & dense)  # fake: dense tensors, quantized where the config says so


# ------------------------------------------------------------------------------------------------
# 3. dense check (tools/compat_transformers.py's unpackers)
# ------------------------------------------------------------------------------------------------

def dense_logits(model_dir, ids):
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, os.path.join(REPO, "tools"))
    from compat_transformers import load_state, unpack_awq, unpack_gptq

    torch.set_num_threads(1)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    q = cfg.get("quantization_config", {}) or {}
    state = load_state(model_dir)
    zm1 = q.get("packing_format", "auto_gptq") in ("auto_round:auto_gptq", "auto_gptq") or q.get("quant_method") == "gptq"
    awq = q.get("packing_format") == "auto_round:auto_awq" or q.get("quant_method") == "awq"

    def packing(module):  # a Linear's own bits and group size (extra_config / gptq dynamic) or the file's
        own = (q.get("extra_config") or {}).get(module)
        for pat, v in (q.get("dynamic") or {}).items():
            if own is None and pat.startswith("+:") and re.match(pat[2:], module):
                own = v
        own = own or {}
        return own.get("bits", q.get("bits", 16)), own.get("group_size", q.get("group_size", -1))

    dense = {}
    for k, v in state.items():
        if k.endswith(".qweight"):
            p = k[: -len(".qweight")]
            bits, group = packing(p)
            if awq:
                dense[p + ".weight"] = unpack_awq(v, state[p + ".qzeros"], state[p + ".scales"],
                                                  group if group > 0 else v.shape[0])
            else:
                in_f = v.shape[0] * 32 // bits
                w = unpack_gptq(v, state[p + ".qzeros"], state[p + ".scales"], bits,
                                group if group > 0 else in_f, zm1)
                dense[p + ".weight"] = w
        elif not k.endswith((".qzeros", ".scales", ".g_idx")):
            dense[k] = v.astype(np.float32)
    lcfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
    model = LlamaForCausalLM(LlamaConfig(**lcfg)).eval()
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in dense.items()}
    # a padded qweight (AutoRound's model-free packing) has more input rows than the Linear
    for k, t in list(sd.items()):
        want = model.state_dict().get(k)
        if want is not None and t.shape != want.shape and t.dim() == 2:
            sd[k] = t[: want.shape[0], : want.shape[1]].contiguous()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not (cfg.get("tie_word_embeddings") and m == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"state dict mismatch: missing {missing[:3]}, unexpected {unexpected[:3]}")
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


# ------------------------------------------------------------------------------------------------
# native load (separate process)
# ------------------------------------------------------------------------------------------------

def native_worker(model_dir, ids_path, out_npy, dtype_name, result_path):
    res = {"ok": False}
    try:
        import numpy as np
        import torch

        torch.set_num_threads(1)
        from transformers import AutoModelForCausalLM

        ids = [int(x) for x in open(ids_path).read().split()]
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype_name),
                                                           device_map="cpu", output_loading_info=True)
        model.eval()
        kinds = collections.Counter()
        for name, mod in model.named_modules():
            if re.match(r"model\.(language_model\.)?layers\.\d+\.(self_attn|mlp)\.\w+_proj$", name):
                kinds[f"{type(mod).__module__}.{type(mod).__name__}"] += 1
        res["modules"] = dict(kinds)
        res["model_dtype"] = str(model.dtype).replace("torch.", "")
        res["missing"] = sorted(info.get("missing_keys", []))
        res["unexpected"] = sorted(info.get("unexpected_keys", []))
        res["stage"] = "forward"
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
        np.save(out_npy, logits)
        res["ok"] = True
    except BaseException as e:  # noqa: BLE001 - reported in the table
        import traceback

        tb = traceback.extract_tb(e.__traceback__)
        where = f"{os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
        res["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} [{where}]"
    json.dump(res, open(result_path, "w"))


def native_logits(model_dir, ids, dtype_name, tmp):
    import numpy as np

    ids_path = os.path.join(tmp, "native.ids")
    open(ids_path, "w").write("\n".join(map(str, ids)) + "\n")
    out_npy, result = os.path.join(tmp, "native.npy"), os.path.join(tmp, "native.json")
    for p in (out_npy, result):
        if os.path.exists(p):
            os.remove(p)
    cmd = [sys.executable, os.path.abspath(__file__), "--native-worker", model_dir, ids_path, out_npy,
           dtype_name, result]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if not os.path.exists(result):
        return None, {"ok": False, "error": f"worker died (rc {r.returncode}): {(r.stderr or '').strip()[-300:]}"}
    res = json.load(open(result))
    backend_lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "backend selection" in ln.lower()
                     or "Kernel: selected" in ln]
    res["backend_log"] = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in backend_lines]
    return (np.load(out_npy) if res.get("ok") else None), res


def short_backend(res):
    mods = res.get("modules") or {}
    q = {k: v for k, v in mods.items() if k != "torch.nn.modules.linear.Linear"}
    dt = f" ({res['model_dtype']})" if res.get("model_dtype") else ""
    if not q:
        return ("nn.Linear only" + dt) if mods else "-"
    out = []
    for k, v in q.items():
        pkg = k.split(".")[0]
        out.append(f"{pkg}:{k.rsplit('.', 1)[-1]} x{v}")
    return ", ".join(out) + dt


# ------------------------------------------------------------------------------------------------
# AutoRound (separate process)
# ------------------------------------------------------------------------------------------------

def autoround_worker(model_dir, out_dir, fmt, result_path):
    res = {"ok": False}
    try:
        import torch

        torch.set_num_threads(1)
        from auto_round import AutoRound
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir)
        ids = tok(open(os.path.join(REPO, "README.md")).read())["input_ids"]
        calib = [torch.tensor([[tok.bos_token_id] + ids[k * 128 + 1:(k + 1) * 128]]) for k in range(8)]
        from auto_round.utils import parse_layer_config_arg

        lc = os.environ.get("AR_CHECK_LAYER_CONFIG")
        ar = AutoRound(model_dir, scheme="W4A16", group_size=128, iters=0, nsamples=8, seqlen=128,
                       dataset=calib, device_map="cpu", layer_config=parse_layer_config_arg(lc) if lc else None)
        res["class"] = type(ar).__name__
        ar.quantize_and_save(out_dir, format=fmt)
        # auto-round 0.16.1 saves into <out_dir>/<model name>-w4g128/
        found = [r for r, _, fs in os.walk(out_dir) if "config.json" in fs]
        res["dir"] = found[0] if found else None
        res["ok"] = bool(found)
    except BaseException as e:  # noqa: BLE001
        res["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    json.dump(res, open(result_path, "w"))


def run_autoround(model_dir, out_dir, fmt):
    result = out_dir + ".json"
    shutil.rmtree(out_dir, ignore_errors=True)
    cmd = [sys.executable, os.path.abspath(__file__), "--autoround-worker", model_dir, out_dir, fmt, result]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if not os.path.exists(result):
        return {"ok": False, "error": f"worker died (rc {r.returncode}): {(r.stderr or '').strip()[-300:]}"}
    res = json.load(open(result))
    res["summary"] = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in (r.stdout + r.stderr).splitlines()
                      if "Summary:" in ln]
    return res


# ------------------------------------------------------------------------------------------------
# patched diagnostic copies
# ------------------------------------------------------------------------------------------------

def patched_gptq(src, dst):
    """Our auto_gptq output + modules_in_block_to_quantize (AutoRound's convention: the union over
    the blocks of the Linears quantized in a block, as names relative to the block)."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    from safetensors import safe_open

    names = set()
    for f in os.listdir(dst):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(dst, f), "pt") as st:
                for k in st.keys():
                    m = re.match(r"model\.layers\.\d+\.(.+)\.qweight$", k)
                    if m:
                        names.add(m.group(1))
    for fn in ("config.json", "quantization_config.json"):
        p = os.path.join(dst, fn)
        if not os.path.exists(p):
            continue
        c = json.load(open(p))
        q = c["quantization_config"] if fn == "config.json" else c
        q["modules_in_block_to_quantize"] = [sorted(names)]
        json.dump(c, open(p, "w"), indent=2)
    return sorted(names)


def patched_fake(src, dst):
    """Our fake output without quantization_config (what AutoRound's FakeFormat writes for W4A16)."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    p = os.path.join(dst, "config.json")
    c = json.load(open(p))
    c.pop("quantization_config", None)
    json.dump(c, open(p, "w"), indent=2)
    q = os.path.join(dst, "quantization_config.json")
    if os.path.exists(q):
        os.remove(q)


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------

def check_output(label, d, args, tmp, kind):
    """One table row. kind: 'ours', 'autoround', 'patched'."""
    import numpy as np

    row = {"label": label, "dir": d, "kind": kind}
    try:
        nq, nk = count_layers(d)
        row["layers"] = f"{'-' if nq is None else nq}/{nk}"
    except Exception as e:  # noqa: BLE001
        row["layers"] = f"? ({type(e).__name__})"
    out = os.path.join(tmp, "ours_logits.bin")
    for f in (out, out + ".ids"):  # `autoround logits` does not replace an earlier file
        if os.path.exists(f):
            os.remove(f)
    ids, ours, err = our_logits(args.autoround, d, args.text, out)
    row["ours"] = "ok" if err is None else "FAIL: " + " ".join(err)
    if ids is None:  # tokenise with transformers for the native run
        from transformers import AutoTokenizer

        ids = AutoTokenizer.from_pretrained(d)(args.text)["input_ids"]
    try:
        ref = dense_logits(d, ids)
        if ours is not None:
            dd = float(np.abs(ref - ours).max())
            row["dense"] = f"{dd:.1e} {'ok' if dd <= DENSE_RTOL * max(1.0, float(np.abs(ref).max())) else 'MISMATCH'}"
        else:
            row["dense"] = "ran (no ours)"
    except Exception as e:  # noqa: BLE001
        row["dense"] = f"FAIL {type(e).__name__}"
        row["dense_error"] = str(e)[:300]
    nat, res = native_logits(d, ids, args.dtype, tmp)
    row["native_res"] = res
    row["backend"] = short_backend(res)
    if nat is None:
        row["native"] = "FAIL"
        row["error"] = res.get("error", "?")
        if res.get("missing") or res.get("unexpected"):  # it loaded, then failed in the forward
            row["error"] += (f" (the load had already reported {len(res.get('missing', []))} missing (newly "
                             f"initialised) and {len(res.get('unexpected', []))} unexpected tensors, e.g. "
                             f"{res.get('missing', [])[:1]} / {res.get('unexpected', [])[:1]})")
        row["diff"] = row["argmax"] = "-"
        row["pass"] = False
    else:
        bad_load = res.get("missing") or [u for u in res.get("unexpected", []) if "rotary" not in u]
        row["native"] = "ok" if not bad_load else "ran, bad load"
        if bad_load:
            row["error"] = f"missing {res.get('missing', [])[:2]}..., unexpected {res.get('unexpected', [])[:2]}..."
        if ours is not None:
            dn = float(np.abs(nat - ours).max())
            mx = float(np.abs(nat).max())
            agree = int((nat.argmax(-1) == ours.argmax(-1)).sum())
            row["diff"] = f"{dn:.2e} / {mx:.2f} = {dn / mx:.1e}"
            row["argmax"] = f"{agree}/{len(ids)}"
            row["pass"] = (not bad_load) and dn <= args.rtol * mx and err is None
            if not row["pass"] and not row.get("error"):
                row["error"] = f"max |diff| {dn:.2e} > {args.rtol:g} x max |logit| {mx:.2f}"
        else:
            row["diff"], row["argmax"], row["pass"] = "no ours", "-", False
    log(f"  {label}: layers {row['layers']}, ours {row['ours']}, dense {row.get('dense')}, native {row['native']}"
        f" [{row['backend']}] {row.get('diff')} argmax {row.get('argmax')}"
        + (f"\n      error: {row['error']}" if row.get("error") else "")
        + (f"\n      dense error: {row['dense_error']}" if row.get("dense_error") else "")
        + "".join(f"\n      {ln}" for ln in res.get("backend_log", [])[:2]))
    return row


def versions():
    from importlib import metadata

    out = {}
    for p in ("torch", "transformers", "auto-round", "optimum", "gptqmodel", "autoawq", "safetensors", "numpy"):
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--autoround", default=os.path.join(REPO, "build", "src", "cli", "autoround"))
    ap.add_argument("--work", default=None, help="work directory (default: a temporary one, removed)")
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="dtype= of the native from_pretrained")
    ap.add_argument("--rtol", type=float, default=None,
                    help="native tolerance, relative to max |logit| (default 2e-2; 5e-2 with --dtype bfloat16)")
    ap.add_argument("--no-autoround", action="store_true", help="skip AutoRound's own outputs")
    ap.add_argument("--no-patched", action="store_true", help="skip the patched diagnostic copies")
    ap.add_argument("--layer_config", default=None, help="check outputs made with this --layer_config only")
    ap.add_argument("--native-worker", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--autoround-worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.native_worker:
        return native_worker(*args.native_worker)
    if args.autoround_worker:
        return autoround_worker(*args.autoround_worker)

    if args.rtol is None:  # bf16 keeps 8 significant bits: a plain nn.Linear model drifts 2.0e-2 here
        args.rtol = 5e-2 if args.dtype == "bfloat16" else 2e-2
    args.autoround = os.path.abspath(args.autoround)
    work = args.work or tempfile.mkdtemp(prefix="loadability_")
    os.makedirs(work, exist_ok=True)
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp, exist_ok=True)
    t0 = time.time()
    vers = versions()
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    log(f"versions: {json.dumps(vers)}; autoround.cpp {commit} ({args.autoround})")
    log(f"native dtype {args.dtype}, tolerance {args.rtol:g} x max|logit|; dense tolerance {DENSE_RTOL:g}")

    model = os.path.join(work, "model_fp")
    shutil.rmtree(model, ignore_errors=True)
    make_model(model)

    log("\n== quantize (ours)")
    outputs = []  # (label, dir)
    if args.layer_config:
        os.environ["AR_CHECK_LAYER_CONFIG"] = args.layer_config  # AutoRound's worker reads it
        args.no_patched = True
        for fmt in ("auto_round", "auto_gptq", "fake"):
            d = os.path.join(work, "ours_lc_" + fmt)
            r = quantize_ours(args.autoround, model, d, fmt, False, default_group=True, layer_config=args.layer_config)
            log(f"$ {r['cmd']}\n  rc {r['rc']}" + "".join(f"\n  {ln}" for ln in r["lines"]))
            outputs.append((fmt + " --layer_config", d, None) if r["rc"] == 0
                           else (fmt, None, r["log_tail"].strip().splitlines()[-1]))
    for asym in (False, True) if not args.layer_config else ():
        for fmt in ("auto_round", "auto_gptq", "auto_awq", "fake"):
            label = fmt + (" --asym" if asym else "")
            d = os.path.join(work, "ours_" + fmt + ("_asym" if asym else ""))
            r = quantize_ours(args.autoround, model, d, fmt, asym)
            log(f"$ {r['cmd']}\n  rc {r['rc']}" + "".join(f"\n  {ln}" for ln in r["lines"]))
            if r["rc"] != 0:
                log("  " + r["log_tail"].strip().splitlines()[-1])
                outputs.append((label, None, r["log_tail"].strip().splitlines()[-1]))
            else:
                outputs.append((label, d, None))
    for fmt in ("auto_round", "auto_gptq", "auto_awq") if not args.layer_config else ():  # default group -> 64
        label = fmt + " (default group -> 64)"
        d = os.path.join(work, "ours_" + fmt + "_g64")
        r = quantize_ours(args.autoround, model, d, fmt, False, default_group=True)
        log(f"$ {r['cmd']}\n  rc {r['rc']}" + "".join(f"\n  {ln}" for ln in r["lines"]))
        outputs.append((label, d, None) if r["rc"] == 0 else (label, None, r["log_tail"].strip().splitlines()[-1]))
    combo = os.path.join(work, "ours_combined")
    r = quantize_ours(args.autoround, model, combo, "auto_round,auto_gptq,auto_awq", False) if not args.layer_config else None
    if r:
        log(f"$ {r['cmd']}\n  rc {r['rc']}" + "".join(f"\n  {ln}" for ln in r["lines"]))
    if r is None:
        pass
    elif r["rc"] == 0:
        for sub, fmt in (("auto-round", "auto_round"), ("auto-gptq", "auto_gptq"), ("auto-awq", "auto_awq")):
            d = os.path.join(combo, sub)
            single = os.path.join(work, "ours_" + fmt, "model.safetensors")
            same = os.path.exists(single) and sha256(single) == sha256(os.path.join(d, "model.safetensors"))
            log(f"  {sub}/model.safetensors {'==' if same else '!='} the single-format {fmt} run's")
            outputs.append((f"{{auto_round,auto_gptq,auto_awq}} -> {sub}/", d, None))
    else:
        outputs.append(("auto_round,auto_gptq,auto_awq", None, r["log_tail"].strip().splitlines()[-1]))

    rows = []
    log("\n== check our outputs")
    for label, d, err in outputs:
        if d is None:
            rows.append({"label": label, "kind": "ours", "layers": "-", "native": "not written", "backend": "-",
                         "diff": "-", "argmax": "-", "pass": False, "error": err, "dense": "-"})
            continue
        rows.append(check_output(label, d, args, tmp, "ours"))

    if not args.no_patched:
        log("\n== diagnostics: patched copies of our outputs")
        src = os.path.join(work, "ours_auto_gptq")
        if os.path.isdir(src):
            names = patched_gptq(src, src + "_patched")
            log(f"  auto_gptq + modules_in_block_to_quantize={[names]}")
            rows.append(check_output("auto_gptq + modules_in_block_to_quantize [patched]", src + "_patched",
                                     args, tmp, "patched"))
        src = os.path.join(work, "ours_fake")
        if os.path.isdir(src):
            patched_fake(src, src + "_patched")
            rows.append(check_output("fake, no quantization_config [patched]", src + "_patched", args, tmp, "patched"))

    if not args.no_autoround:
        log("\n== AutoRound's own outputs (same model)")
        for fmt in ("auto_round", "auto_gptq", "auto_awq") if not args.layer_config else ("auto_round", "auto_gptq"):
            d = os.path.join(work, "autoround_" + fmt)
            res = run_autoround(model, d, fmt)
            log(f"  AutoRound(model_fp, scheme='W4A16', group_size=128, iters=0, nsamples=8, seqlen=128, "
                f"dataset=<8x128 ids>).quantize_and_save(dir, format={fmt!r}): "
                + (f"ok ({res.get('class')}) -> {res['dir']}" if res["ok"] else f"FAILED: {res.get('error')}")
                + "".join(f"\n    {ln}" for ln in res.get("summary", [])))
            if res["ok"]:
                rows.append(check_output(f"AutoRound {fmt}", res["dir"], args, tmp, "autoround"))
            else:
                rows.append({"label": f"AutoRound {fmt}", "kind": "autoround", "layers": "-", "native": "not written",
                             "backend": "-", "diff": "-", "argmax": "-", "pass": False, "error": res.get("error"),
                             "dense": "-"})

    log(f"\n== table (native dtype {args.dtype}; pass: loads with no missing weights, runs, "
        f"max|diff| <= {args.rtol:g} x max|logit|; dense: Python dequantization vs ours <= {DENSE_RTOL:g})")
    hdr = ["output", "quantized/kept", "ours", "dense |diff|", "native load", "backend", "max|diff| / max|logit|",
           "argmax", "verdict"]
    table = [hdr]
    for r in rows:
        table.append([r["label"], r.get("layers", "-"), "ok" if r.get("ours") == "ok" else ("-" if "ours" not in r else "FAIL"),
                      r.get("dense", "-"), r["native"], r["backend"], r.get("diff", "-"), r.get("argmax", "-"),
                      "PASS" if r["pass"] else "FAIL"])
    w = [max(len(str(t[i])) for t in table) for i in range(len(hdr))]
    for i, t in enumerate(table):
        log("| " + " | ".join(str(c).ljust(w[j]) for j, c in enumerate(t)) + " |")
        if i == 0:
            log("|" + "|".join("-" * (x + 2) for x in w) + "|")
    log("\nfailures:")
    for r in rows:
        if not r["pass"]:
            log(f"  {r['label']}: {r.get('error') or r.get('ours')}")
    log(f"\n{time.time() - t0:.0f} s; work directory {work}")
    ok = all(r["pass"] for r in rows if r["kind"] == "ours")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
