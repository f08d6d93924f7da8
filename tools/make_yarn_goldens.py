#!/usr/bin/env python3
"""YaRN RoPE parameters as transformers computes them (`_compute_yarn_parameters`: the blended inverse
frequencies and the cos/sin attention factor) and the softmax scale DeepSeek-V3 folds mscale_all_dim into
(`yarn_apply_mscale`), for tests/test_model.cpp's YaRN test (model/rope_table.cpp, ModelConfig::attention_scale).

Not part of the test suite and not run in CI. Needs a virtual environment outside the repository with torch
and transformers 5. From the repository root:

    /work/venv/bin/python tools/make_yarn_goldens.py --out tests/data/yarn/expected.json
"""
from __future__ import annotations

import argparse
import json


def main() -> None:
    from transformers import DeepseekV3Config
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, yarn_apply_mscale
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cases = {
        "deepseek_v3": dict(factor=40.0, original_max_position_embeddings=4096, beta_fast=32, beta_slow=1,
                            mscale=1.0, mscale_all_dim=1.0),
        "mscale_ratio": dict(factor=16.0, original_max_position_embeddings=2048, beta_fast=16, beta_slow=2,
                             mscale=0.707, mscale_all_dim=1.0),
        "plain_untruncated": dict(factor=4.0, original_max_position_embeddings=512, truncate=False),
    }
    out = {}
    for name, rp in cases.items():
        rope = dict(rope_type="yarn", rope_theta=10000.0, **rp)
        cfg = DeepseekV3Config(hidden_size=64, num_attention_heads=4, qk_rope_head_dim=64, qk_nope_head_dim=32,
                               max_position_embeddings=163840, rope_parameters=rope)
        inv, af = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
        out[name] = dict(rope_parameters=rope, rope_dims=64, qk_head_dim=96, inv_freq=[float(x) for x in inv],
                         attention_factor=float(af), softmax_scale=float(yarn_apply_mscale(rope, 96 ** -0.5)))
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
