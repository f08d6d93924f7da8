#!/usr/bin/env python3
"""Golden files written by AutoRound and transformers themselves, for the C++ test suite.

Not part of the test suite and not run in CI: it needs a Python virtual environment with torch,
transformers 5, auto-round, sentencepiece, protobuf and tokenizers (the goldens were made with
torch 2.15.0, transformers 5.24.0, auto-round 0.16.1, tokenizers 0.23.3, sentencepiece 0.2.3,
protobuf 7.36.2, all on the CPU). Exact command (from the repository root; takes a minute or two):

    /work/arvenv/bin/python tools/make_autoround_goldens.py \\
        --fixtures ../shared/fixtures --out tests/data/autoround_golden

It (re)writes tests/data/autoround_golden/:

  tokenizer/            a SentencePiece BPE model (byte fallback) trained on this repository's
                        docs/*.md + README.md, converted by transformers' LlamaTokenizer and written
                        with save_pretrained (tokenizer.json with a Metaspace pre-tokenizer,
                        tokenizer_config.json) + encodings.json (ids / decodes transformers gives).
  tokenizer_variants/   the same tokenizer.json with the Metaspace options changed
                        (prepend_scheme "always" and/or split true) + encodings from the
                        `tokenizers` library (transformers' LlamaTokenizer class would rebuild the
                        pre-tokenizer with its own defaults, so these use tokenizer_class
                        PreTrainedTokenizerFast).
  spm/tokenizer.model   the SentencePiece model itself (the input of the conversion).
  model_fp/             tiny random Llama (hidden 64, 2 layers, 4 heads / 2 KV heads, intermediate
                        168, rope_theta 1e5 in rope_parameters), bfloat16, save_pretrained.
  w4g32_autoround/      AutoRound(W4A16, group_size 32, iters 4, 8 x 64 calibration tokens) ->
                        quantize_and_save(format="auto_round").
  rtn_modelfree/        AutoRound's model-free RTN route (model given as a path, iters=0,
                        disable_opt_rtn=True), W4A16 group_size 32: down_proj (in 168) gets a
                        qweight padded to 192 input rows.
  w4g32_gptq/           as w4g32_autoround, format="auto_gptq".
  expected.json         perplexity / KL numbers computed in float64 with the convention of
                        src/eval/perplexity.cpp on a byte range of the WikiText-2 fixture.
  manifest.json         versions, files AutoRound wrote, packed tensor shapes (stored vs natural),
                        sizes and sha256 of every file here.
  README.md             what all of this is.

The eval text is NOT copied: expected.json names the fixture's relative path, byte range and
sha256, and the tests read it at run time.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import io
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 0
CTX = 128
EVAL_FIXTURE = "text/wikitext-2-raw/wiki.test.raw"
EVAL_BYTES = 12 * 1024  # the range ends at the last newline at or before this many bytes
VOCAB = 512
INIT_STD = 0.05
SUPPORTED_NOTE = []  # free-form notes that end up in manifest.json


def sha256_bytes(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def sha256_file(p: str) -> str:
    with open(p, "rb") as f:
        return sha256_bytes(f.read())


def ids_sha256(ids) -> str:
    """sha256 of the ids as little-endian int32."""
    return sha256_bytes(np.asarray(ids, dtype="<i4").tobytes())


def dumps(obj, indent: int = 1, level: int = 0) -> str:
    """JSON with dicts indented and lists of scalars (and flat dicts of scalars) kept on one line."""
    pad, pad1 = " " * (indent * level), " " * (indent * (level + 1))

    def scalar(x):
        return not isinstance(x, (dict, list))

    if isinstance(obj, dict):
        if not obj:
            return "{}"
        if all(scalar(v) for v in obj.values()) and len(obj) <= 8:
            return json.dumps(obj, ensure_ascii=False)
        items = [f"{pad1}{json.dumps(k, ensure_ascii=False)}: {dumps(v, indent, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        if all(scalar(v) for v in obj):
            return json.dumps(obj, ensure_ascii=False)
        if all(isinstance(v, dict) and all(scalar(x) or (isinstance(x, list) and all(scalar(y) for y in x))
                                           for x in v.values()) for v in obj):
            return "[\n" + ",\n".join(pad1 + json.dumps(v, ensure_ascii=False) for v in obj) + "\n" + pad + "]"
        return "[\n" + ",\n".join(pad1 + dumps(v, indent, level + 1) for v in obj) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)


def write_json(path: str, obj) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(dumps(obj) + "\n")


def versions() -> dict:
    import auto_round
    import google.protobuf
    import safetensors
    import sentencepiece
    import tokenizers
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "auto_round": auto_round.__version__,
        "tokenizers": tokenizers.__version__,
        "sentencepiece": sentencepiece.__version__,
        "safetensors": safetensors.__version__,
        "protobuf": google.protobuf.__version__,
        "numpy": np.__version__,
    }


def git_head() -> str:
    try:
        import subprocess

        return subprocess.check_output(["git", "-C", REPO, "rev-parse", "HEAD"], text=True).strip()
    except Exception:
        return "unknown"


# --------------------------------------------------------------------------------------------
# 1. tokenizer
# --------------------------------------------------------------------------------------------

TEST_STRINGS = [
    "Hello world",
    "hello world",
    " leading space",
    "two  spaces",
    "three   spaces",
    "trailing space ",
    "line one\nline two",
    "tab\tseparated\tvalues",
    "\n\nstarts with newlines",
    "",
    " ",
    "   ",
    "12345 and 3.14159 and 2026",
    "Punctuation: (a, b); [c] {d}! \"quoted\" 'single' -- end?",
    "café naïve résumé Ångström",
    "Привет, мир",
    "你好，世界",
    "emoji 🙂 and 🚀 rocket",
    "<s>",
    "</s>",
    "<unk>",
    "a</s>b <s> c",
    "<s>text right after BOS",
    "</s> space after EOS",
    "x<unk>y",
    "▁literal metaspace char",
    "The quantizer reads group_size=32 and writes qweight, qzeros, scales.",
]


def train_sentencepiece(vocab_size: int) -> tuple[bytes, list[str]]:
    import sentencepiece as spm

    files = sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))) + [os.path.join(REPO, "README.md")]
    lines = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            lines += [ln for ln in fh.read().split("\n") if ln.strip()]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        model_type="bpe",
        vocab_size=vocab_size,
        byte_fallback=True,
        character_coverage=1.0,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        add_dummy_prefix=True,
        num_threads=1,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        max_sentence_length=100000,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    return buf.getvalue(), [os.path.relpath(f, REPO) for f in files]


def encodings_with(tok_encode, tok_decode, strings):
    cases = []
    for s in strings:
        with_sp = tok_encode(s, True)
        without = tok_encode(s, False)
        cases.append(
            {
                "text": s,
                "ids_add_special": with_sp,
                "ids_no_special": without,
                "decode_skip_special": tok_decode(with_sp, True),
                "decode_keep_special": tok_decode(with_sp, False),
            }
        )
    return cases


def make_tokenizer(out: str) -> tuple[dict, object]:
    import sentencepiece as spm
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, LlamaTokenizer, PreTrainedTokenizerFast

    proto, sources = train_sentencepiece(VOCAB)
    os.makedirs(os.path.join(out, "spm"), exist_ok=True)
    with open(os.path.join(out, "spm", "tokenizer.model"), "wb") as f:
        f.write(proto)

    tmp = tempfile.mkdtemp(prefix="ar_golden_tok_")
    with open(os.path.join(tmp, "tokenizer.model"), "wb") as f:
        f.write(proto)
    # What a Llama-2 repository ships besides tokenizer.model.
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
                   "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, f)
    tok = LlamaTokenizer.from_pretrained(tmp)
    tdir = os.path.join(out, "tokenizer")
    os.makedirs(tdir, exist_ok=True)
    written = list(tok.save_pretrained(tdir))
    shutil.rmtree(tmp)
    # reload the way a user would
    tok = AutoTokenizer.from_pretrained(tdir)
    tj = json.load(open(os.path.join(tdir, "tokenizer.json"), encoding="utf-8"))
    print("== tokenizer.json (", type(tok).__name__, ", len", len(tok), ")")
    for k in ("normalizer", "pre_tokenizer", "decoder", "post_processor"):
        print(f"  {k}: {json.dumps(tj[k], ensure_ascii=False)}")
    model_meta = {k: v for k, v in tj["model"].items() if k not in ("vocab", "merges")}
    print("  model:", json.dumps(model_meta), "vocab", len(tj["model"]["vocab"]), "merges", len(tj["model"]["merges"]))
    assert tj["pre_tokenizer"]["type"] == "Metaspace", tj["pre_tokenizer"]

    def enc(s, sp):
        return tok(s, add_special_tokens=sp)["input_ids"]

    def dec(ids, skip):
        return tok.decode(ids, skip_special_tokens=skip)

    cases = encodings_with(enc, dec, TEST_STRINGS)
    # cross-checks: the raw `tokenizers` library on the saved file, and SentencePiece on the proto
    raw = Tokenizer.from_file(os.path.join(tdir, "tokenizer.json"))
    sp = spm.SentencePieceProcessor(model_proto=proto)
    spm_diff = []
    for c in cases:
        assert raw.encode(c["text"], add_special_tokens=True).ids == c["ids_add_special"], c["text"]
        assert raw.encode(c["text"], add_special_tokens=False).ids == c["ids_no_special"], c["text"]
        c["tokens_add_special"] = tok.convert_ids_to_tokens(c["ids_add_special"])
        c["sentencepiece_ids"] = sp.encode(c["text"])  # no BOS; SentencePiece knows no special tokens in text
        if c["sentencepiece_ids"] != c["ids_no_special"]:
            spm_diff.append(c["text"])
    enc_doc = {
        "tokenizer": "tokenizer/tokenizer.json (+ tokenizer_config.json)",
        "produced_by": "transformers AutoTokenizer.from_pretrained(tokenizer/) -> "
                       f"{type(tok).__name__}; ids = tok(text, add_special_tokens=...)['input_ids']; "
                       "decode_skip_special = tok.decode(ids_add_special, skip_special_tokens=True), "
                       "decode_keep_special likewise with False (clean_up_tokenization_spaces is false)",
        "checked": "the `tokenizers` library's Tokenizer.from_file(tokenizer.json).encode gives the same ids",
        "sentencepiece_ids": "SentencePiece (spm/tokenizer.model) encode of the same text, for information "
                             "only; it differs from transformers where listed in differs_from_sentencepiece",
        "differs_from_sentencepiece": spm_diff,
        "vocab_size": len(tok),
        "bos_id": tok.bos_token_id,
        "eos_id": tok.eos_token_id,
        "unk_id": tok.unk_token_id,
        "cases": cases,
    }
    write_json(os.path.join(tdir, "encodings.json"), enc_doc)

    # variants of the pre-tokenizer
    vdir = os.path.join(out, "tokenizer_variants")
    os.makedirs(vdir, exist_ok=True)
    variants = {}
    for scheme, split in (("always", False), ("first", True), ("always", True)):
        name = f"metaspace_{scheme}_split_{str(split).lower()}"
        j = json.loads(json.dumps(tj))
        j["pre_tokenizer"]["prepend_scheme"] = scheme
        j["pre_tokenizer"]["split"] = split
        path = os.path.join(vdir, name + ".tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
        raw_v = Tokenizer.from_file(path)
        fast_v = PreTrainedTokenizerFast(tokenizer_file=path, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                         clean_up_tokenization_spaces=False)

        def enc_v(s, spc, raw_v=raw_v):
            return raw_v.encode(s, add_special_tokens=spc).ids

        def dec_v(ids, skip, raw_v=raw_v):
            return raw_v.decode(ids, skip_special_tokens=skip)

        vc = encodings_with(enc_v, dec_v, TEST_STRINGS)
        for c in vc:
            assert fast_v(c["text"], add_special_tokens=True)["input_ids"] == c["ids_add_special"]
            assert fast_v.decode(c["ids_add_special"], skip_special_tokens=True) == c["decode_skip_special"]
        write_json(os.path.join(vdir, name + ".encodings.json"),
                   {"tokenizer": os.path.basename(path), "pre_tokenizer": j["pre_tokenizer"],
                    "produced_by": "tokenizers.Tokenizer.from_file(...).encode(text, add_special_tokens=...).ids "
                                   "and .decode(ids, skip_special_tokens=...); checked equal to transformers "
                                   "PreTrainedTokenizerFast(tokenizer_file=...)",
                    "cases": vc})
        variants[name] = j["pre_tokenizer"]
    # Does transformers' LlamaTokenizer honour a tokenizer.json whose Metaspace differs from its defaults?
    tmp = tempfile.mkdtemp(prefix="ar_golden_var_")
    shutil.copy(os.path.join(vdir, "metaspace_always_split_true.tokenizer.json"), os.path.join(tmp, "tokenizer.json"))
    shutil.copy(os.path.join(tdir, "tokenizer_config.json"), tmp)
    t_llama = AutoTokenizer.from_pretrained(tmp)
    honoured = json.loads(t_llama.backend_tokenizer.to_str())["pre_tokenizer"]
    shutil.rmtree(tmp)
    note = (f"transformers {type(t_llama).__name__}.from_pretrained on a tokenizer.json with Metaspace "
            f"prepend_scheme=always/split=true gives the backend pre_tokenizer {json.dumps(honoured)}")
    print(" ", note)
    SUPPORTED_NOTE.append(note)

    info = {
        "class": type(tok).__name__,
        "files_written_by_save_pretrained": sorted(os.path.basename(p) for p in written),
        "trained_on": sources,
        "trained_on_commit": git_head(),
        "sentencepiece_trainer": "model_type=bpe vocab_size=%d byte_fallback character_coverage=1.0 split_digits "
                                 "allow_whitespace_only_pieces remove_extra_whitespaces=false identity normalization "
                                 "add_dummy_prefix unk=0 bos=1 eos=2 no pad" % VOCAB,
        "normalizer": tj["normalizer"],
        "pre_tokenizer": tj["pre_tokenizer"],
        "decoder": tj["decoder"],
        "post_processor": tj["post_processor"],
        "model": model_meta,
        "vocab_entries": len(tj["model"]["vocab"]),
        "merges": len(tj["model"]["merges"]),
        "variants": variants,
        "differs_from_sentencepiece": spm_diff,
    }
    return info, tok


# --------------------------------------------------------------------------------------------
# 2. model
# --------------------------------------------------------------------------------------------


def make_model(out: str, tok) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=168,
        vocab_size=len(tok),
        max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        initializer_range=INIT_STD,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # not all ones, so a loader that drops them is caught
                p.copy_(1.0 + 0.2 * (torch.rand(p.shape, generator=g) - 0.5))
            else:
                assert abs(p.std().item() - INIT_STD) < 0.01, (name, p.std().item())
    model = model.to(torch.bfloat16)
    d = os.path.join(out, "model_fp")
    model.save_pretrained(d)
    tok.save_pretrained(d)
    print("== model_fp/config.json")
    print(open(os.path.join(d, "config.json")).read())
    return json.load(open(os.path.join(d, "config.json")))


# --------------------------------------------------------------------------------------------
# 3. AutoRound
# --------------------------------------------------------------------------------------------

KEEP_EXACT = {"config.json", "generation_config.json", "quantization_config.json", "quantize_config.json",
              "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
              "model.safetensors.index.json"}


def prune(d: str) -> tuple[list[str], list[str]]:
    written = sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)
    dropped = []
    for f in written:
        if f in KEEP_EXACT or (f.endswith(".safetensors") and "/" not in f):
            continue
        p = os.path.join(d, f)
        os.remove(p)
        dropped.append(f)
    for r, ds, _ in os.walk(d, topdown=False):
        for x in ds:
            try:
                os.rmdir(os.path.join(r, x))
            except OSError:
                pass
    return written, dropped


def flatten_export_dir(d: str) -> str:
    """auto-round 0.16.1's regular flow saves into <output_dir>/<model name>-w4g32/ (_get_export_dir);
    move that folder's contents up to d. Returns where AutoRound actually wrote, relative to d."""
    if os.path.exists(os.path.join(d, "config.json")):
        return "."
    subs = [x for x in os.listdir(d) if os.path.isdir(os.path.join(d, x))]
    assert len(subs) == 1 and os.path.exists(os.path.join(d, subs[0], "config.json")), (d, os.listdir(d))
    sub = os.path.join(d, subs[0])
    for x in os.listdir(sub):
        shutil.move(os.path.join(sub, x), os.path.join(d, x))
    os.rmdir(sub)
    return subs[0] + "/"


def calibration_samples(ids, bos, n=8, seqlen=64):
    samples = []
    for k in range(n):
        s = list(ids[k * seqlen:(k + 1) * seqlen])
        s[0] = bos
        samples.append(torch.tensor([s], dtype=torch.long))
    return samples


def ar_attrs(ar) -> dict:
    out = {"class": type(ar).__name__}
    for k in ("amp", "amp_dtype", "enable_torch_compile", "device", "iters", "nsamples", "seqlen", "batch_size",
              "group_size", "bits", "sym", "data_type", "lr", "minmax_lr", "seed", "disable_opt_rtn",
              "enable_minmax_tuning", "enable_quanted_input"):
        try:
            v = getattr(ar, k, None)
        except Exception:  # noqa: BLE001
            v = None
        if v is not None and not isinstance(v, property) and not str(v).startswith("<"):
            out[k] = v if isinstance(v, (int, float, bool, str)) else str(v)
    return out


def run_autoround(out: str, eval_ids, bos) -> dict:
    from auto_round import AutoRound

    mfp = os.path.join(out, "model_fp")
    runs = {}
    calib = calibration_samples(eval_ids, bos)
    for name, fmt in (("w4g32_autoround", "auto_round"), ("w4g32_gptq", "auto_gptq")):
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        kwargs = dict(scheme="W4A16", group_size=32, iters=4, nsamples=8, seqlen=64, batch_size=4, seed=42,
                      device_map="cpu")
        t0 = time.time()
        ar = AutoRound(mfp, dataset=calib, **kwargs)
        attrs = ar_attrs(ar)
        ar.quantize_and_save(d, format=fmt)
        where = flatten_export_dir(d)
        written, dropped = prune(d)
        runs[name] = {
            "call": f"AutoRound('model_fp', dataset=<8 x LongTensor[1,64]>, "
                    + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + f").quantize_and_save(dir, format={fmt!r})",
            "attributes_after_init": attrs,
            "autoround_wrote_into": f"{name}/{where} (moved up to {name}/)",
            "files_written": written,
            "files_dropped": dropped,
            "seconds": round(time.time() - t0, 1),
        }
        del ar
    d = os.path.join(out, "rtn_modelfree")
    shutil.rmtree(d, ignore_errors=True)
    kwargs = dict(scheme="W4A16", group_size=32, iters=0, disable_opt_rtn=True)
    t0 = time.time()
    ar = AutoRound(mfp, **kwargs)  # model as a path string -> model-free route
    attrs = ar_attrs(ar)
    assert "ModelFree" in type(ar).__name__, f"expected the model-free route, got {type(ar).__name__}"
    ar.quantize_and_save(d, format="auto_round")
    where = flatten_export_dir(d)
    written, dropped = prune(d)
    runs["rtn_modelfree"] = {
        "call": "AutoRound('model_fp' (a path string), " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
                + ").quantize_and_save(dir, format='auto_round')",
        "attributes_after_init": attrs,
        "autoround_wrote_into": f"rtn_modelfree/{where}",
        "files_written": written,
        "files_dropped": dropped,
        "seconds": round(time.time() - t0, 1),
    }
    return runs


# --------------------------------------------------------------------------------------------
# dequantization (the packed formats, read directly)
# --------------------------------------------------------------------------------------------


def load_st(d: str) -> dict:
    from safetensors.torch import load_file

    t = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        t.update(load_file(f))
    return t


def quant_config(d: str) -> dict:
    cfg = json.load(open(os.path.join(d, "config.json")))
    qc = cfg.get("quantization_config")
    if qc is None and os.path.exists(os.path.join(d, "quantization_config.json")):
        qc = json.load(open(os.path.join(d, "quantization_config.json")))
    return qc or {}


def zero_offset(qc: dict) -> tuple[int, str]:
    """What to add to a stored zero nibble to get the zero point."""
    method = qc.get("quant_method", "")
    packing = qc.get("packing_format", "")
    if method == "gptq":
        fmt = qc.get("checkpoint_format", "gptq")
        if fmt == "gptq_v2":
            return 0, "gptq checkpoint_format gptq_v2: zero stored as is"
        return 1, "gptq checkpoint_format gptq (v1): zero stored minus 1, add 1"
    if packing in ("auto_round:auto_gptq",):
        return 1, f"packing_format {packing}: zero stored minus 1 (qlinear_torch_zp adds 1)"
    if packing in ("auto_round", "auto_round:gptqmodel", ""):
        return 0, f"packing_format {packing or '(none) auto_round'}: zero stored as is (qlinear_torch)"
    raise ValueError(f"unknown packing {qc}")


def unpack_rows(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """[R, C] int32 -> [R * 32/bits, C]: value k of word r is bits (k*bits ..) of it, low bits first."""
    pf = 32 // bits
    w = packed.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(pf, dtype=torch.int64) * bits
    v = (w.unsqueeze(1) >> shifts.view(1, pf, 1)) & ((1 << bits) - 1)
    return v.reshape(packed.shape[0] * pf, packed.shape[1])


def unpack_cols(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """[R, C] int32 -> [R, C * 32/bits]."""
    pf = 32 // bits
    w = packed.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(pf, dtype=torch.int64) * bits
    v = (w.unsqueeze(2) >> shifts.view(1, 1, pf)) & ((1 << bits) - 1)
    return v.reshape(packed.shape[0], packed.shape[1] * pf)


def dequant_layer(t: dict, prefix: str, qc: dict, out_f: int, in_f: int, info: dict) -> torch.Tensor:
    bits, gs = int(qc["bits"]), int(qc["group_size"])
    qweight, qzeros, scales = t[prefix + ".qweight"], t[prefix + ".qzeros"], t[prefix + ".scales"]
    assert qweight.dtype == torch.int32 and qzeros.dtype == torch.int32 and scales.dtype == torch.float16
    pf = 32 // bits
    G = math.ceil(in_f / gs)
    off, _ = zero_offset(qc)
    q = unpack_rows(qweight, bits)  # [in_stored, out]
    z = unpack_cols(qzeros, bits)[:, :out_f] + off  # [G_stored, out]
    rec = {
        "qweight": {"stored": list(qweight.shape), "natural": [math.ceil(in_f / pf), out_f]},
        "qzeros": {"stored": list(qzeros.shape), "natural": [G, math.ceil(out_f / pf)]},
        "scales": {"stored": list(scales.shape), "natural": [G, out_f]},
        "in_features": in_f,
        "out_features": out_f,
    }
    if prefix + ".g_idx" in t:
        rec["g_idx"] = {"stored": list(t[prefix + ".g_idx"].shape),
                        "dtype": str(t[prefix + ".g_idx"].dtype).replace("torch.", ""), "values": "i // group_size"}
        g_idx = t[prefix + ".g_idx"].to(torch.int64)
        assert torch.equal(g_idx[:in_f], torch.arange(in_f) // gs), "g_idx is not the trivial i // group_size"
    assert q.shape[0] >= in_f and q.shape[1] == out_f and scales.shape[1] == out_f
    if q.shape[0] > in_f:  # padded input rows: what do they hold?
        pad = q[in_f:]
        pad_z = z[torch.arange(in_f, q.shape[0]) // gs]
        rec["padding"] = {
            "dimension": "qweight rows (input features), after the last real input feature",
            "rows_stored_minus_natural": qweight.shape[0] - math.ceil(in_f / pf),
            "padded_input_features": q.shape[0] - in_f,
            "padded_values_unique": sorted(set(pad.flatten().tolist())),
            "padded_values_equal_zero_point": bool(torch.equal(pad, pad_z)),
            "padded_words_unique_hex": sorted({"0x%08x" % (int(x) & 0xFFFFFFFF)
                                               for x in qweight[math.ceil(in_f / pf):].flatten().tolist()}),
        }
        if in_f % pf:
            rec["padding"]["note"] = "the last natural word is partly padding"
    g = torch.arange(in_f) // gs
    wt = scales.to(torch.float64)[g] * (q[:in_f].to(torch.float64) - z[g].to(torch.float64))  # [in, out]
    # the same in float32 is exact (|q - z| <= 15, fp16 scale: <= 15 significant bits)
    wt32 = scales.to(torch.float32)[g] * (q[:in_f].to(torch.float32) - z[g].to(torch.float32))
    assert torch.equal(wt32.to(torch.float64), wt)
    rec["qzeros_words_unique_hex"] = sorted({"0x%08x" % (int(x) & 0xFFFFFFFF) for x in qzeros.flatten().tolist()})
    rec["zero_points_unique"] = sorted(set(z.flatten().tolist()))
    info[prefix] = rec
    return wt.t().contiguous()


def check_with_autoround_qlinear(t: dict, prefix: str, qc: dict, w: torch.Tensor) -> float:
    """Dequantize with auto-round's own torch QuantLinear (its forward unpacks), scales made fp32."""
    off, _ = zero_offset(qc)
    if off == 1:
        from auto_round_extension.torch.qlinear_torch_zp import QuantLinear
    else:
        from auto_round_extension.torch.qlinear_torch import QuantLinear
    bits, gs = int(qc["bits"]), int(qc["group_size"])
    qweight = t[prefix + ".qweight"]
    in_stored = qweight.shape[0] * 32 // bits
    out_f = qweight.shape[1]
    ql = QuantLinear(bits, gs, in_stored, out_f, bias=False)
    ql.qweight = qweight.clone()
    ql.qzeros = t[prefix + ".qzeros"].clone()
    ql.scales = t[prefix + ".scales"].to(torch.float32)
    with torch.no_grad():
        wt = ql(torch.eye(in_stored, dtype=torch.float32))  # [in_stored, out] = W^T
    in_f = w.shape[1]
    return float((wt[:in_f].to(torch.float64) - w.t()).abs().max())


def dequant_dir(d: str, fp_state: dict) -> tuple[dict, dict]:
    t = load_st(d)
    qc = quant_config(d)
    state, info = {}, {}
    max_diff = 0.0
    for k, v in t.items():
        if k.endswith(".qweight"):
            prefix = k[: -len(".qweight")]
            out_f, in_f = fp_state[prefix + ".weight"].shape
            w = dequant_layer(t, prefix, qc, out_f, in_f, info)
            max_diff = max(max_diff, check_with_autoround_qlinear(t, prefix, qc, w))
            state[prefix + ".weight"] = w
        elif k.endswith((".qzeros", ".scales", ".g_idx")):
            continue
        else:
            state[k] = v.to(torch.float64)
            info.setdefault("_unquantized", {})[k] = {"dtype": str(v.dtype).replace("torch.", ""),
                                                       "shape": list(v.shape)}
    assert max_diff == 0.0, f"auto-round QuantLinear disagrees with the format reading by {max_diff}"
    fp_raw = load_st(os.path.join(os.path.dirname(d), "model_fp"))
    same = [k for k in t if k in fp_raw and t[k].dtype == fp_raw[k].dtype and torch.equal(t[k], fp_raw[k])]
    differ = [k for k in t if k in fp_raw and k not in same]
    missing = set(fp_state) - set(state)
    assert not missing, missing
    from safetensors import safe_open

    tensors, meta = {}, {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with safe_open(f, "pt") as fh:
            meta[os.path.basename(f)] = fh.metadata()
    for k, v in sorted(t.items()):
        tensors[k] = f"{str(v.dtype).replace('torch.', '')} {list(v.shape)}"
    return state, {"unquantized_tensors_bit_identical_to_model_fp": len(same),
                   "unquantized_tensors_differing_from_model_fp": differ,
                   "layers": info, "zero_offset": zero_offset(qc)[1], "quantization_config": qc,
                   "autoround_qlinear_max_abs_diff": max_diff, "safetensors_metadata": meta, "tensors": tensors}


# --------------------------------------------------------------------------------------------
# 4. eval, the convention of src/eval/perplexity.cpp
# --------------------------------------------------------------------------------------------


def build_f64(config_dir: str, state: dict):
    from transformers import AutoConfig, LlamaForCausalLM

    cfg = AutoConfig.from_pretrained(config_dir)
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    cfg._attn_implementation = "eager"
    m = LlamaForCausalLM(cfg).to(torch.float64)
    missing, unexpected = m.load_state_dict(state, strict=True), None
    m.eval()
    return m


def window_logprobs(model, ids, ctx, bos):
    n = len(ids) // ctx
    x = torch.tensor(ids[: n * ctx], dtype=torch.long).view(n, ctx).clone()
    x[:, 0] = bos
    with torch.no_grad():
        logits = model(input_ids=x, use_cache=False).logits.to(torch.float64)
    lp = torch.log_softmax(logits, dim=-1)
    first = ctx // 2
    lp = lp[:, first: ctx - 1]  # positions ctx/2 .. ctx-2
    tgt = x[:, first + 1: ctx]
    return lp.reshape(-1, lp.shape[-1]), tgt.reshape(-1), n


def ppl_numbers(nll: torch.Tensor, windows: int, ctx: int) -> dict:
    n = nll.numel()
    mean = float(nll.mean())
    var = float(((nll * nll).sum() / n - mean * mean) * n / (n - 1))
    ppl = math.exp(mean)
    per_window = nll.view(windows, -1).mean(1).tolist()
    return {"ppl": ppl, "ppl_stderr": ppl * math.sqrt(max(0.0, var) / n), "nll_mean": mean,
            "tokens_scored": n, "windows": windows, "ctx": ctx, "nll_mean_per_window": per_window}


def compare_numbers(lq, lp, tgt, windows, ctx) -> dict:
    kl = (lp.exp() * (lp - lq)).sum(-1)
    agree = (lq.argmax(-1) == lp.argmax(-1)).double().mean().item()
    a = -lq.gather(1, tgt[:, None]).squeeze(1)
    b = -lp.gather(1, tgt[:, None]).squeeze(1)
    n = kl.numel()
    s = torch.sort(kl).values
    med = float(s[n // 2]) if n % 2 else 0.5 * float(s[n // 2 - 1] + s[n // 2])
    p99 = float(s[min(n - 1, math.ceil(0.99 * n) - 1)])

    def var_mean(u, v):
        return float(((u * v).sum() / n - (u.sum() / n) * (v.sum() / n)) / (n - 1))

    model, ref = ppl_numbers(a, windows, ctx), ppl_numbers(b, windows, ctx)
    var = (model["ppl"] ** 2 * var_mean(a, a) + ref["ppl"] ** 2 * var_mean(b, b)
           - 2 * model["ppl"] * ref["ppl"] * var_mean(a, b))
    def gap(l):
        top2 = torch.topk(l, 2, dim=-1).values
        return top2[:, 0] - top2[:, 1]

    g = torch.minimum(gap(lq), gap(lp))
    ties = {"min_top1_top2_logprob_gap": float(g.min()), "positions_with_gap_below_1e-4": int((g < 1e-4).sum()),
            "positions_with_gap_below_1e-3": int((g < 1e-3).sum())}
    return {"top1_near_ties": ties, "model": model, "ref": ref, "kl_mean": float(kl.mean()), "kl_median": med, "kl_p99": p99,
            "kl_max": float(s[-1]), "top1_agreement": agree, "delta_ppl": model["ppl"] - ref["ppl"],
            "delta_ppl_stderr": math.sqrt(max(0.0, var))}


def try_transformers_load(d: str, lp_ref_model, ids, ctx, bos) -> dict:
    """Does transformers' own loading path take the directory on the CPU? (for the record)"""
    from transformers import AutoModelForCausalLM

    rec = {"call": "AutoModelForCausalLM.from_pretrained(dir, device_map='cpu', dtype=torch.float32, "
                   "output_loading_info=True)"}
    try:
        m, linfo = AutoModelForCausalLM.from_pretrained(d, device_map="cpu", dtype=torch.float32,
                                                        output_loading_info=True)
    except Exception as e:  # noqa: BLE001
        msg = str(e).strip().split("\n")
        rec.update(loads=False, error=f"{type(e).__name__}: " + " | ".join(x for x in msg if x.strip())[:600])
        return rec
    m.eval()
    rec["loads"] = True
    rec["model_dtype"] = str(m.dtype)
    rec["missing_keys"] = sorted(linfo.get("missing_keys", []))
    rec["unexpected_keys"] = sorted(linfo.get("unexpected_keys", []))
    rec["module_classes"] = {n_: type(mod).__module__ + "." + type(mod).__name__ for n_, mod in m.named_modules()
                             if n_.startswith("model.layers.0.") and n_.endswith("_proj")}
    try:
        lp, tgt, windows = window_logprobs(m, ids, ctx, bos)
        rec["forward"] = "ok"
        rec["max_abs_logprob_diff_vs_exact_float64_dequant"] = float((lp - lp_ref_model).abs().max())
        rec["ppl"] = math.exp(float(-lp.gather(1, tgt[:, None]).mean()))
    except Exception as e:  # noqa: BLE001
        msg = str(e).strip().split("\n")
        rec["forward"] = f"{type(e).__name__}: " + " | ".join(x for x in msg if x.strip())[:600]
    return rec


def write_readme(out: str, manifest: dict, expected: dict) -> None:
    v = manifest["versions"]
    files = {os.path.relpath(os.path.join(r, f), out): {"bytes": os.path.getsize(os.path.join(r, f))}
             for r, _, fs in os.walk(out) for f in fs if f != "README.md"}

    def dir_bytes(prefix):
        return sum(x["bytes"] for f, x in files.items() if f.startswith(prefix))

    res = expected["results"]
    tok = manifest["tokenizer"]
    mf = manifest["packed"]["rtn_modelfree"]["layers"]
    down = mf["model.layers.0.mlp.down_proj"]
    runs = manifest["autoround_runs"]
    L = []
    L.append("# AutoRound / transformers goldens")
    L.append("")
    L.append("Written by `tools/make_autoround_goldens.py` (not run in CI; it needs a Python environment with "
             "torch, transformers 5, auto-round, sentencepiece, protobuf, tokenizers). Regenerate with")
    L.append("")
    L.append("    " + manifest["command"])
    L.append("")
    L.append(f"Versions: torch {v['torch']}, transformers {v['transformers']}, auto-round {v['auto_round']}, "
             f"tokenizers {v['tokenizers']}, sentencepiece {v['sentencepiece']}, safetensors {v['safetensors']}, "
             f"protobuf {v['protobuf']}, Python {v['python']}; CPU only, torch threads 1. Repository commit when "
             f"made: `{manifest['repository_commit'][:12]}` (the tokenizer is trained on that commit's docs, so a "
             "rerun after the docs change gives a different vocabulary: these files are committed goldens, not "
             "regenerated).")
    L.append("")
    L.append("| path | bytes | what |")
    L.append("|---|---:|---|")
    rows = [
        ("tokenizer/", "SentencePiece BPE (vocab %d, byte fallback) trained on docs/*.md + README.md, converted by "
         "transformers' `%s` and written with `save_pretrained` (tokenizer.json, tokenizer_config.json); "
         "`encodings.json`: %d strings, ids with and without special tokens, decodes" %
         (expected_vocab(manifest), tok["class"], len(TEST_STRINGS))),
        ("tokenizer_variants/", "the same tokenizer.json with Metaspace prepend_scheme `always` and/or `split: true`, "
         "and the ids/decodes the `tokenizers` library gives for the same strings"),
        ("spm/", "the SentencePiece model (protobuf) the tokenizer was converted from"),
        ("model_fp/", "tiny random Llama, bfloat16, `save_pretrained` (+ the tokenizer files)"),
        ("w4g32_autoround/", "AutoRound W4A16 g32, 4 iters, `format=\"auto_round\"` (regular flow)"),
        ("rtn_modelfree/", "AutoRound model-free RTN W4A16 g32 (`iters=0, disable_opt_rtn=True`, model as a path)"),
        ("w4g32_gptq/", "as w4g32_autoround with `format=\"auto_gptq\"`"),
        ("expected.json", "perplexity / KL reference numbers"),
        ("manifest.json", "versions, calls, files AutoRound wrote, every tensor's dtype and shape, packed shapes "
         "stored vs natural, padding, sizes and sha256"),
    ]
    for pth, what in rows:
        L.append(f"| `{pth}` | {dir_bytes(pth):,} | {what} |")
    L.append(f"| total (without this README) | {sum(x['bytes'] for x in files.values()):,} | |")
    L.append("")
    L.append("## Tokenizer")
    L.append("")
    L.append("tokenizer.json (transformers writes no normalizer):")
    L.append("")
    for k in ("normalizer", "pre_tokenizer", "decoder", "post_processor"):
        L.append(f"- `{k}`: `{json.dumps(tok[k], ensure_ascii=False)}`")
    L.append(f"- model: `{json.dumps(tok['model'])}`, {tok['vocab_entries']} vocabulary entries, "
             f"{tok['merges']} merges")
    L.append("")
    L.append("tokenizer_config.json as transformers 5 writes it has no `add_bos_token`; the BOS comes from the "
             "post-processor template (`<s> $A`). The source tokenizer_config.json given to transformers said "
             "`add_bos_token: true` as Llama-2's does.")
    L.append("")
    L.append("Behaviours the cases pin down: Metaspace `prepend_scheme: first` prepends `▁` only to the first "
             "section and only when the text does not already start with `▁` (so \" leading space\" starts with a "
             "lone `▁`, where SentencePiece would give `▁▁`); text right after a special token gets no `▁`; the "
             "decoder strips one leading space. SentencePiece itself differs from transformers on: " +
             ", ".join("`%s`" % json.dumps(x, ensure_ascii=False)[1:-1] for x in tok["differs_from_sentencepiece"]) +
             " (sentencepiece_ids in encodings.json, for information).")
    L.append("")
    for n in manifest["notes"]:
        L.append("Note: " + n + ". So transformers' LlamaTokenizer ignores the file's Metaspace options; the "
                 "variant encodings come from the `tokenizers` library (equal to `PreTrainedTokenizerFast`).")
    L.append("")
    L.append("## Model")
    L.append("")
    L.append("model_fp/config.json:")
    L.append("")
    L.append("```json")
    L.append(json.dumps(manifest["model_fp_config"], indent=1))
    L.append("```")
    L.append("")
    L.append(manifest["seed"]["model_init"] + ".")
    L.append("")
    L.append("## AutoRound outputs")
    L.append("")
    for name in ("w4g32_autoround", "w4g32_gptq", "rtn_modelfree"):
        r = runs[name]
        L.append(f"- `{name}`: `{r['call']}`; wrote into `{r['autoround_wrote_into']}`: "
                 f"{', '.join(r['files_written'])}; nothing dropped" if not r["files_dropped"] else
                 f"- `{name}`: `{r['call']}`; wrote {r['files_written']}, dropped {r['files_dropped']}")
    L.append("")
    L.append("The regular flow (w4g32_autoround, w4g32_gptq) leaves gate/up/down_proj in bfloat16 (168 is not a "
             "multiple of 32: `extra_config` / `dynamic` say so) and quantizes q/k/v/o_proj. Both formats hold "
             "the same quantized values. The model-free flow quantizes all seven projections.")
    L.append("")
    L.append("Model-free padding: `down_proj` (in 168, out 64) is stored with qweight " +
             f"{down['qweight']['stored']} (natural {down['qweight']['natural']}), qzeros "
             f"{down['qzeros']['stored']} (natural {down['qzeros']['natural']}), scales {down['scales']['stored']} "
             f"(natural {down['scales']['natural']}). auto-round pads the weight's input dimension with zeros to a "
             "multiple of group_size (168 -> 192) before quantizing; the 24 padded input rows are packed as "
             f"q = zero point (words {', '.join(down['padding']['padded_words_unique_hex'])}), i.e. they dequantize "
             "to 0. The group count stays ceil(168/32) = 6 (the last group's scale comes from its 8 real inputs "
             "and 24 zeros), so qzeros and scales are not padded. gate/up_proj (out 168, a multiple of 8) are not "
             "padded.")
    L.append("")
    words = {w for p in manifest["packed"].values() for k, r in p["layers"].items() if not k.startswith("_")
             for w in r["qzeros_words_unique_hex"]}
    decl = {n: (p["quantization_config"].get("packing_format") or
                f"quant_method {p['quantization_config'].get('quant_method')}") for n, p in manifest["packed"].items()}
    L.append("Zero points: declared " + ", ".join(f"`{n}`: `{x}`" for n, x in decl.items()) +
             f"; every qzeros word is {', '.join(sorted(words))}, i.e. the stored nibble is zero - 1 = 7 "
             "(symmetric 4 bit, zero point 8): W[o, i] = scale[i // 32, o] * (q[i, o] - (stored_zero + 1)). "
             "w4g32_gptq also stores g_idx (int32, i // 32). The safetensors files AutoRound writes have no "
             "`__metadata__` (model_fp's, from transformers, has " +
             json.dumps(manifest["model_fp_safetensors_metadata"]) + ").")
    L.append("")
    L.append("The 4 SignRound iterations kept the initial rounding (the best loss was at iteration 0): "
             f"{runs['w4g32_autoround']['packed_tensors_equal_to_rtn_modelfree']} packed tensors of "
             "w4g32_autoround equal the model-free RTN ones; w4g32_gptq's equal w4g32_autoround's "
             f"({runs['w4g32_gptq']['packed_tensors_equal_to_w4g32_autoround']}). Tensors AutoRound leaves "
             "unquantized are bit-identical to model_fp's.")
    L.append("")
    L.append("transformers' own loading on the CPU (`AutoModelForCausalLM.from_pretrained(dir, device_map='cpu')`):")
    L.append("")
    for name in ("w4g32_autoround", "w4g32_gptq", "rtn_modelfree"):
        t = runs[name]["transformers_from_pretrained_cpu"]
        if not t["loads"]:
            L.append(f"- `{name}`: refused: {t['error']}")
        else:
            extra = f"; forward: {t['forward']}"
            if t.get("forward") == "ok":
                extra += (f", ppl {t['ppl']:.4f}, max |log p - exact| {t['max_abs_logprob_diff_vs_exact_float64_dequant']:.2e}"
                          f" (it runs in {t['model_dtype']})")
            miss = t["missing_keys"]
            L.append(f"- `{name}`: loads as {t['model_dtype']}; missing keys {len(miss)}"
                     + (f" ({', '.join(miss[:3])}{', ...' if len(miss) > 3 else ''}: left randomly initialised)"
                        if miss else "") + f", unexpected {len(t['unexpected_keys'])}" + extra)
    L.append("")
    L.append("## Reference numbers (expected.json)")
    L.append("")
    et = expected["eval_text"]
    L.append(f"Eval text: `../shared/fixtures/{et['fixture']}` bytes [0, {et['bytes']}) (sha256 `{et['sha256']}`), "
             f"{expected['tokens']['count']} tokens with BOS, ctx {expected['ctx']}: {expected['tokens']['windows']} "
             f"windows x {expected['tokens']['scored_per_window']} scored positions. Computed in float64; see "
             "`description` in expected.json for every detail.")
    L.append("")
    L.append("| model | ppl | KL mean | KL median | KL p99 | KL max | top-1 agreement |")
    L.append("|---|---:|---:|---:|---:|---:|---:|")
    L.append(f"| model_fp | {res['model_fp']['perplexity']['ppl']:.6f} | | | | | |")
    for name in ("w4g32_autoround", "rtn_modelfree", "w4g32_gptq"):
        c = res[name]["vs_model_fp"]
        L.append(f"| {name} | {res[name]['perplexity']['ppl']:.6f} | {c['kl_mean']:.4e} | {c['kl_median']:.4e} | "
                 f"{c['kl_p99']:.4e} | {c['kl_max']:.4e} | {c['top1_agreement']:.6f} |")
    L.append("")
    L.append("A random model predicts little: its perplexity is near the vocabulary size. The numbers are for "
             "checking that a reader computes the same thing, not model quality.")
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(L) + "\n")


def expected_vocab(manifest: dict) -> int:
    return manifest["model_fp_config"]["vocab_size"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", default=os.path.join(REPO, "..", "shared", "fixtures"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "autoround_golden"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = os.path.abspath(args.out)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    vers = versions()
    print("versions:", vers)

    tok_info, tok = make_tokenizer(out)

    # eval text
    src = os.path.join(args.fixtures, EVAL_FIXTURE)
    raw = open(src, "rb").read()
    end = raw.rfind(b"\n", 0, EVAL_BYTES) + 1
    text_b = raw[:end]
    text = text_b.decode("utf-8")
    ids = tok(text, add_special_tokens=True)["input_ids"]
    bos = tok.bos_token_id
    print(f"eval text: {end} bytes, {len(ids)} tokens, {len(ids) // CTX} windows of {CTX}")

    config = make_model(out, tok)
    runs = run_autoround(out, ids, bos)

    fp_state = {k: v.to(torch.float64) for k, v in load_st(os.path.join(out, "model_fp")).items()}
    mfp = build_f64(os.path.join(out, "model_fp"), fp_state)
    lp_fp, tgt, windows = window_logprobs(mfp, ids, CTX, bos)
    nll_fp = -lp_fp.gather(1, tgt[:, None]).squeeze(1)
    results = {"model_fp": {"perplexity": ppl_numbers(nll_fp, windows, CTX)}}
    packed = {}
    for name in ("w4g32_autoround", "rtn_modelfree", "w4g32_gptq"):
        d = os.path.join(out, name)
        state, info = dequant_dir(d, fp_state)
        packed[name] = info
        m = build_f64(os.path.join(out, "model_fp"), state)
        lq, tgt_q, _ = window_logprobs(m, ids, CTX, bos)
        assert torch.equal(tgt_q, tgt)
        nll_q = -lq.gather(1, tgt[:, None]).squeeze(1)
        results[name] = {"perplexity": ppl_numbers(nll_q, windows, CTX),
                         "vs_model_fp": compare_numbers(lq, lp_fp, tgt, windows, CTX)}
        runs[name]["transformers_from_pretrained_cpu"] = try_transformers_load(d, lq, ids, CTX, bos)
        print(f"{name}: ppl {results[name]['perplexity']['ppl']:.6f} kl_mean "
              f"{results[name]['vs_model_fp']['kl_mean']:.3e} top1 {results[name]['vs_model_fp']['top1_agreement']:.4f}"
              f" transformers load: {runs[name]['transformers_from_pretrained_cpu']}")
        for layer, rec in info["layers"].items():
            if layer.startswith("_"):
                continue
            print(f"   {layer}: " + ", ".join(f"{k} {rec[k]['stored']} (natural {rec[k]['natural']})"
                                             for k in ("qweight", "qzeros", "scales"))
                  + (f"  PADDED {rec['padding']}" if "padding" in rec else ""))
    print("model_fp: ppl", results["model_fp"]["perplexity"]["ppl"])
    # Did the 4 SignRound iterations change anything relative to plain RTN (the model-free output)?
    a = load_st(os.path.join(out, "w4g32_autoround"))
    b = load_st(os.path.join(out, "rtn_modelfree"))
    shared = sorted(k for k in a if k.endswith((".qweight", ".qzeros", ".scales")) and k in b)
    same = [k for k in shared if torch.equal(a[k], b[k])]
    gq = load_st(os.path.join(out, "w4g32_gptq"))
    runs["w4g32_autoround"]["packed_tensors_equal_to_rtn_modelfree"] = f"{len(same)} of {len(shared)}"
    runs["w4g32_gptq"]["packed_tensors_equal_to_w4g32_autoround"] = (
        f"{sum(torch.equal(a[k], gq[k]) for k in a if k in gq and k.endswith(('.qweight', '.qzeros', '.scales')))}"
        f" of {sum(1 for k in a if k.endswith(('.qweight', '.qzeros', '.scales')))}")
    print("w4g32_autoround packed tensors equal to plain RTN (model-free):", f"{len(same)} of {len(shared)}")
    from safetensors import safe_open

    with safe_open(os.path.join(out, "model_fp", "model.safetensors"), "pt") as fh:
        fp_meta = fh.metadata()

    expected = {
        "description": (
            "Numbers of `autoround eval` (src/eval/perplexity.cpp) computed by PyTorch in float64. "
            "tokens = transformers tokenizer (tokenizer/) of the eval text with add_special_tokens=True (BOS "
            "first); windows = floor(tokens / ctx) non-overlapping windows of ctx tokens (the tail shorter "
            "than ctx is dropped); the first token of each window is replaced by BOS; positions ctx/2 .. "
            "ctx-2 of each window are scored (log-softmax of the logits there, predicting the token at the "
            "next position). ppl = exp(mean NLL), ppl_stderr = ppl * sqrt(sample variance of the NLLs / n). "
            "vs_model_fp: model = the quantized model, ref = model_fp; KL(ref || model) per position = "
            "sum_v p_ref (log p_ref - log p_model); median = mean of the two middle values when n is even; "
            "p99 = sorted[min(n-1, ceil(0.99 n) - 1)]; top1_agreement = share of positions whose argmaxes "
            "agree; delta_ppl_stderr from the per-token NLL variances and covariance exactly as "
            "compare_models does. Forward: transformers LlamaForCausalLM (eager attention, use_cache=False) "
            "converted to float64, with model_fp's config and weights: model_fp's bfloat16 tensors "
            "widened exactly; for the quantized outputs every packed layer dequantized exactly from its "
            "qweight/qzeros/scales as W[o, i] = scale[g(i), o] * (q[i, o] - zero[g(i), o]), g(i) = i // "
            "group_size, zero = stored nibble (+1 for the auto_gptq / gptq v1 convention), rows past "
            "in_features dropped (see manifest.json packed), and the tensors that stay unquantized "
            "(embeddings, norms, lm_head and the layers AutoRound kept in 16 bits) widened exactly. "
            "The dequantized weights were checked bit-equal to auto-round's own "
            "auto_round_extension.torch QuantLinear unpacking (with fp32 scales; the stock module "
            "multiplies in fp16). The same weights in float32 are exact too (fp16 scale times an integer "
            "of magnitude <= 15)."),
        "ctx": CTX,
        "eval_text": {"fixture": EVAL_FIXTURE, "fixtures_root": "../shared/fixtures (relative to the repository)",
                      "byte_range": [0, end], "bytes": end, "sha256": sha256_bytes(text_b),
                      "file_sha256": sha256_bytes(raw),
                      "how_cut": f"bytes [0, end) where end-1 is the last newline before byte {EVAL_BYTES}"},
        "tokens": {"count": len(ids), "bos_id": bos, "sha256_int32_le": ids_sha256(ids),
                   "first_16": ids[:16], "last_16": ids[-16:], "windows": windows,
                   "scored_per_window": CTX - 1 - CTX // 2},
        "calibration": {"used_by": ["w4g32_autoround", "w4g32_gptq"],
                        "samples": "8 x LongTensor[1, 64]: sample k = tokens[64k : 64k+64] with its first id "
                                   "replaced by BOS",
                        "sha256_int32_le": ids_sha256(torch.cat(calibration_samples(ids, bos)).flatten().tolist())},
        "results": results,
    }
    write_json(os.path.join(out, "expected.json"), expected)

    manifest = {
        "generator": "tools/make_autoround_goldens.py",
        "command": "/work/arvenv/bin/python tools/make_autoround_goldens.py --fixtures ../shared/fixtures "
                   "--out tests/data/autoround_golden",
        "repository_commit": git_head(),
        "versions": vers,
        "torch_threads": torch.get_num_threads(),
        "seed": {"model_init": f"torch.manual_seed({SEED}) then LlamaForCausalLM(config) (normal std "
                               f"{INIT_STD}); norm weights 1 + U(-0.1, 0.1) from Generator seed {SEED + 1}",
                 "autoround": 42},
        "tokenizer": tok_info,
        "model_fp_config": config,
        "model_fp_safetensors_metadata": fp_meta,
        "autoround_runs": runs,
        "packed": packed,
        "notes": SUPPORTED_NOTE,
    }

    files = sorted(os.path.relpath(os.path.join(r, f), out) for r, _, fs in os.walk(out) for f in fs)
    manifest["files"] = {f: {"bytes": os.path.getsize(os.path.join(out, f)), "sha256": sha256_file(os.path.join(out, f))}
                         for f in files}
    manifest["total_bytes_excluding_manifest_and_readme"] = sum(v["bytes"] for v in manifest["files"].values())
    write_json(os.path.join(out, "manifest.json"), json.loads(json.dumps(manifest, default=str)))
    write_readme(out, manifest, expected)
    print("total bytes:", manifest["total_bytes_excluding_manifest_and_readme"])


if __name__ == "__main__":
    main()
