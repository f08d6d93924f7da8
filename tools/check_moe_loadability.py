#!/usr/bin/env python3
"""Do autoround.cpp's outputs of mixture-of-experts models load in transformers + auto-round / gptqmodel
with the logits our `eval` / `logits` computes? (issue 24; docs/moe.md)

Not part of the test suite. Same virtual environment as tools/check_loadability.py (torch 2.15.0,
transformers 5.24.0, auto-round 0.16.1, optimum 2.3.0, gptqmodel 7.7.0 on the CPU); the CLI must
already be built. From the repository root (a few minutes on 2 cores):

    /work/arvenv/bin/python tools/check_moe_loadability.py --autoround build/src/cli/autoround \\
        --work /tmp/moe_loadability

For each architecture (Qwen3-MoE, Qwen2-MoE with its shared expert, Mixtral, DeepSeek-V3 with latent
attention and its sigmoid router, GLM-4.5 with partial RoPE, gpt-oss with sinks, 32-key windows and
biased experts, Gemma 3, Gemma 3 inside Gemma3ForConditionalGeneration (gemma3_mm: a tiny SigLIP vision tower
beside it, stored as save_pretrained writes it, language_model.model.*), and Qwen3-Next (a Gated DeltaNet layer
and a gated full-attention layer, 8 experts and the gated shared expert), Qwen3.5-MoE (the same with split
linear-attention projections) and inside Qwen3_5MoeForConditionalGeneration (qwen3_5_moe_mm: a one-block vision
tower, model.language_model.* / model.visual.*); `--archs` picks some) it
  1. makes a random model with transformers (hidden 128, 4 heads of 32 / 2 KV heads, 8 experts of 64,
     top-2, 2 layers; Qwen3-MoE's layer 0 dense; vocab 512 with the tokenizer of
     tests/data/autoround_golden/tokenizer/), bfloat16, save_pretrained (per-expert tensors);
  2. quantizes it with our CLI, W4 G32, --iters 2 --nsamples 8 --seqlen 64, as auto_round,
     auto_gptq, auto_awq and fake (one run, `--format auto_round,auto_gptq,auto_awq,fake`);
  3. for each output: our logits (`autoround logits`) against AutoModelForCausalLM.from_pretrained in
     float32 (a separate process: check_loadability.py's native worker), and for GPTQ / AWQ also
     against GPTQModel.load (gptqmodel 7.7.0, `BUILD_CUDA_EXT=0 pip install gptqmodel optimum`), the
     load that counts for them (GPTQMODEL_FORMATS below); a load with missing or unexpected weights
     fails; max |diff| <= --rtol * max |logit| passes (Qwen3-Next: run it with --rtol 5e-2; auto-round's
     CPU kernels run the model in float16, where its fake output, the plain fp32 weights, is itself 2.8e-2
     off the fp32 logits, at a token whose experts nearly tie);
  4. for a multimodal model: every output holds the vision tower and projector tensors byte for byte
     (fp16 outputs: their fp16 values).
Exit status 0 when every row passes.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_loadability as cl  # noqa: E402

ARCHS = ("qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v3", "glm4_moe", "gpt_oss", "gemma3", "gemma3_mm", "qwen3_next",
         "qwen3_5_moe", "qwen3_5_moe_mm")
FORMATS = ("auto_round", "auto_gptq", "auto_awq", "fake")
# GPTQ / AWQ outputs load through gptqmodel's own loader (GPTQModel.load), which builds per-expert
# Linears: transformers 5's from_pretrained builds its fused expert modules (mlp.experts.gate_up_proj,
# down_proj), finds the per-expert qweight/qzeros/scales that the checkpoint holds (as AutoRound writes
# them) "unexpected" and leaves the experts at their random initialisation. Both rows are printed.
GPTQMODEL_FORMATS = ("auto_gptq", "auto_awq")


def gptqmodel_worker(model_dir, ids_path, out_npy, result_path):
    """Logits of model_dir loaded by GPTQModel.load on the CPU (a separate process, like cl.native_worker)."""
    import json

    res = {"ok": False}
    try:
        import collections

        import numpy as np
        import torch

        torch.set_num_threads(1)
        from gptqmodel import GPTQModel

        ids = [int(x) for x in open(ids_path).read().split()]
        model = GPTQModel.load(model_dir, device="cpu")
        kinds = collections.Counter(type(m).__name__ for n, m in model.model.named_modules()
                                    if ".experts." in n and n.endswith("_proj"))
        res["modules"] = {f"experts:{k}": v for k, v in kinds.items()}
        with torch.no_grad():
            logits = model.model(torch.tensor([ids])).logits[0].float().numpy()
        np.save(out_npy, logits)
        res["ok"] = True
    except BaseException as e:  # noqa: BLE001 - reported in the table
        res["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    json.dump(res, open(result_path, "w"))


def gptqmodel_logits(model_dir, ids, tmp):
    import json

    import numpy as np

    ids_path, out_npy, result = (os.path.join(tmp, n) for n in ("gptq.ids", "gptq.npy", "gptq.json"))
    open(ids_path, "w").write("\n".join(map(str, ids)) + "\n")
    for p in (out_npy, result):
        if os.path.exists(p):
            os.remove(p)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--gptqmodel-worker", model_dir, ids_path, out_npy,
                        result], capture_output=True, text=True, timeout=900)
    if not os.path.exists(result):
        return None, {"ok": False, "error": f"worker died (rc {r.returncode}): {(r.stderr or '').strip()[-300:]}"}
    res = json.load(open(result))
    return (np.load(out_npy) if res.get("ok") else None), res


def vision_bytes(model_dir, out_dir):
    """Whether the output holds every tensor of the input outside the language model with its values."""
    import torch
    from safetensors.torch import load_file

    src, out = load_file(os.path.join(model_dir, "model.safetensors")), load_file(os.path.join(out_dir, "model.safetensors"))
    names = [n for n in src if not n.startswith(("language_model.", "model.language_model.", "lm_head."))]
    missing = [n for n in names if n not in out]
    if missing:
        return f"{len(missing)} of {len(names)} missing ({missing[0]})"
    same = all(torch.equal(src[n], out[n]) if out[n].dtype == src[n].dtype else torch.equal(src[n].half(), out[n])
               for n in names)
    return f"{len(names)} tensors " + ("identical" if same else "DIFFER")


def make_model(arch, d, hidden=128, expert=64, dense_first=True, linear_dim=32):
    """A random model of `arch` (Qwen3-MoE's layer 0 dense when dense_first) into d, with the tokenizer;
    the Gated DeltaNet layers have 2 key and 4 value heads of linear_dim."""
    import torch
    from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, Gemma3Config, Gemma3ForCausalLM,
                              Gemma3ForConditionalGeneration, Gemma3TextConfig,
                              Glm4MoeConfig, Glm4MoeForCausalLM, GptOssConfig, GptOssForCausalLM, MixtralConfig,
                              MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3MoeConfig,
                              Qwen3MoeForCausalLM, Qwen3NextConfig, Qwen3NextForCausalLM, Qwen3_5MoeConfig,
                              Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration, Qwen3_5MoeTextConfig,
                              Qwen3_5ForCausalLM, Qwen3_5TextConfig)

    common = dict(vocab_size=512, hidden_size=hidden, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                  rms_norm_eps=1e-6, num_hidden_layers=2, num_experts_per_tok=2, initializer_range=0.05)
    if arch == "qwen3_moe":
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**common, head_dim=hidden // 4, intermediate_size=2 * hidden,
                                                   moe_intermediate_size=expert, num_experts=8, norm_topk_prob=True,
                                                   mlp_only_layers=[0] if dense_first else []))
    elif arch == "qwen2_moe":
        model = Qwen2MoeForCausalLM(Qwen2MoeConfig(**common, intermediate_size=2 * hidden, moe_intermediate_size=expert,
                                                   shared_expert_intermediate_size=hidden, num_experts=8,
                                                   norm_topk_prob=False))
    elif arch == "deepseek_v3":  # q_lora, YaRN, 8 experts in 4 groups, a shared expert, layer 0 dense
        common.update(num_key_value_heads=4)
        model = DeepseekV3ForCausalLM(DeepseekV3Config(
            **common, intermediate_size=2 * hidden, moe_intermediate_size=expert, q_lora_rank=64, kv_lora_rank=32,
            qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=32, n_routed_experts=8, n_group=4, topk_group=2,
            routed_scaling_factor=2.5, n_shared_experts=1, first_k_dense_replace=1, num_mtp_layers=0,
            rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                 original_max_position_embeddings=128, mscale=1.0, mscale_all_dim=1.0)))
    elif arch == "glm4_moe":  # q/k/v biases, partial RoPE, 8 experts, a shared expert, layer 0 dense
        model = Glm4MoeForCausalLM(Glm4MoeConfig(
            **common, head_dim=hidden // 4, intermediate_size=2 * hidden, moe_intermediate_size=expert,
            attention_bias=True, n_routed_experts=8, n_shared_experts=1, first_k_dense_replace=1, num_mtp_layers=0,
            routed_scaling_factor=1.5))
    elif arch == "gemma3":  # dense: sandwich norms (1 + w), GeLU-tanh, a 32-key window on layer 0, tied
        common.update(tie_word_embeddings=True)
        model = Gemma3ForCausalLM(Gemma3TextConfig(**common, head_dim=hidden // 4, intermediate_size=2 * hidden,
                                                   sliding_window=32, query_pre_attn_scalar=hidden // 4,
                                                   layer_types=["sliding_attention", "full_attention"]))
    elif arch == "gemma3_mm":  # the gemma3 case's language model beside a SigLIP tower (no soft-cap: refused there)
        common.update(tie_word_embeddings=True)
        text = Gemma3TextConfig(**common, head_dim=hidden // 4, intermediate_size=2 * hidden, sliding_window=32,
                                query_pre_attn_scalar=hidden // 4, layer_types=["sliding_attention", "full_attention"])
        vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                      patch_size=14, vision_use_head=False)
        model = Gemma3ForConditionalGeneration(Gemma3Config(text_config=text.to_dict(), vision_config=vision,
                                                            mm_tokens_per_image=4))
    elif arch == "qwen3_next":  # a Gated DeltaNet layer, then gated full attention; 8 experts, the gated shared expert
        model = Qwen3NextForCausalLM(Qwen3NextConfig(
            **common, head_dim=hidden // 4, intermediate_size=2 * hidden, moe_intermediate_size=expert, num_experts=8,
            shared_expert_intermediate_size=hidden, norm_topk_prob=True, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=linear_dim, linear_value_head_dim=linear_dim,
            layer_types=["linear_attention", "full_attention"]))
    elif arch == "qwen3_5":  # dense Qwen3.5: the split projections, a SwiGLU MLP in every layer
        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(
            **common, pad_token_id=0, head_dim=hidden // 4, intermediate_size=2 * hidden, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=linear_dim, linear_value_head_dim=linear_dim,
            layer_types=["linear_attention", "full_attention"]))
    elif arch.startswith("qwen3_5_moe"):  # Qwen3-Next's layers with the split projections, every layer MoE
        text = Qwen3_5MoeTextConfig(  # pad_token_id: GPTQModel's Qwen3.5 takes 248044 (the release's) otherwise
            **common, pad_token_id=0, head_dim=hidden // 4, moe_intermediate_size=expert, num_experts=8,
            shared_expert_intermediate_size=hidden, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=linear_dim, linear_value_head_dim=linear_dim,
            layer_types=["linear_attention", "full_attention"])
        vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4, spatial_merge_size=2,
                      temporal_patch_size=2, out_hidden_size=hidden, num_position_embeddings=16)
        model = (Qwen3_5MoeForConditionalGeneration(Qwen3_5MoeConfig(text_config=text.to_dict(), vision_config=vision))
                 if arch.endswith("_mm") else Qwen3_5MoeForCausalLM(text))
    elif arch == "gpt_oss":  # sinks, windows of 32 on layer 0, biased experts, the clamped SwiGLU, YaRN
        model = GptOssForCausalLM(GptOssConfig(**common, head_dim=hidden // 4, intermediate_size=expert,
                                               num_local_experts=8, sliding_window=32))
    else:
        model = MixtralForCausalLM(MixtralConfig(**common, intermediate_size=expert, num_local_experts=8))
    torch.manual_seed(0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if arch == "gpt_oss" and (n.endswith("sinks") or n.endswith("bias")):
                p.normal_(0, 0.5 if n.endswith("sinks") else 0.05)
            elif arch.startswith("qwen3_") and p.dim() == 1 and "visual" not in n:  # norms applied as 1 + w but the gated one; decays
                p.normal_(0, 0.1) if not n.endswith(("linear_attn.norm.weight", "dt_bias")) else p.fill_(1.0)
            elif arch.startswith("qwen3_") and n.endswith("mlp.gate.weight"):  # top-2 margins above float16's error:
                p.normal_(0, 0.5)  # auto-round runs float16, where a near-tie picks other experts than ours
            else:
                if p.dim() > 1:
                    p.normal_(0, 0.05)
                else:  # Gemma's norms multiply by 1 + w
                    p.normal_(0, 0.1) if arch.startswith("gemma3") else p.fill_(1.0)
    model.to(torch.bfloat16).save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(cl.TOKENIZER_DIR, f), d)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--native-worker":
        return cl.native_worker(*sys.argv[2:7])
    if len(sys.argv) > 1 and sys.argv[1] == "--gptqmodel-worker":
        return gptqmodel_worker(*sys.argv[2:6])
    ap = argparse.ArgumentParser()
    ap.add_argument("--autoround", default="build/src/cli/autoround")
    ap.add_argument("--work", default="/tmp/moe_loadability")
    ap.add_argument("--rtol", type=float, default=2e-2)
    ap.add_argument("--text", default=cl.DEFAULT_TEXT)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--dtype", default="float32", help="the native load's dtype")
    ap.add_argument("--scheme_args", default="--bits 4 --group_size 32",
                    help='the weight scheme, e.g. "--scheme NVFP4 --act_bits 16" with --formats llm_compressor')
    a = ap.parse_args()
    formats = a.formats.split(",")
    autoround = os.path.abspath(a.autoround)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    rows, ok = [], True
    for arch in a.archs.split(","):
        model = os.path.join(a.work, arch)
        make_model(arch, model)
        out = os.path.join(a.work, arch + "_q")
        cmd = [autoround, "--model", model, "--output_dir", out, "--format", ",".join(formats), "--iters", "2",
               "--nsamples", "8", "--seqlen", "64", "--threads", "2", "--overwrite"] + a.scheme_args.split()
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            rows.append((arch, "-", "quantize failed: " + (r.stdout + r.stderr).strip().splitlines()[-1]))
            ok = False
            continue
        for fmt in formats:
            d = os.path.join(out, fmt.replace("_", "-")) if len(formats) > 1 else out
            ids, ours, err = cl.our_logits(autoround, d, a.text, os.path.join(a.work, f"{arch}_{fmt}.bin"))
            if err:
                rows.append((arch, fmt, "our logits failed: " + " ".join(err)))
                ok = False
                continue
            loaders = [("from_pretrained", lambda: cl.native_logits(d, ids, a.dtype, a.work))]
            if fmt in GPTQMODEL_FORMATS:
                loaders.append(("GPTQModel.load", lambda: gptqmodel_logits(d, ids, a.work)))
            for loader, load in loaders:
                # transformers' own load of a MoE GPTQ/AWQ checkpoint is reported, not required (see above)
                required = fmt not in GPTQMODEL_FORMATS or loader == "GPTQModel.load"
                native, res = load()
                if native is None:
                    rows.append((arch, f"{fmt} ({loader})", "load failed: " + res.get("error", "?")))
                    ok &= not required
                    continue
                diff = float(abs(native - ours).max()) / max(1.0, float(abs(ours).max()))
                bad = res.get("missing") or res.get("unexpected")
                verdict = "ok" if diff <= a.rtol and not bad else ("FAIL" if required else "fails (not required)")
                ok &= verdict != "FAIL"
                note = f"missing {res.get('missing')[:2]} unexpected {res.get('unexpected')[:2]}" if bad else ""
                backend = cl.short_backend(res) if loader == "from_pretrained" else str(res.get("modules"))
                rows.append((arch, f"{fmt} ({loader})", f"max|diff|/max|logit| {diff:.2e}, argmax agreement "
                                                        f"{float((native.argmax(-1) == ours.argmax(-1)).mean()):.3f}, "
                                                        f"{backend} {note} -> {verdict}"))
        if arch.endswith("_mm"):
            for fmt in formats:
                d = os.path.join(out, fmt.replace("_", "-")) if len(formats) > 1 else out
                rows.append((arch, fmt, "vision tower and projector: " + vision_bytes(model, d)))
                ok &= rows[-1][2].endswith("identical")
    print("| model | format | result |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
