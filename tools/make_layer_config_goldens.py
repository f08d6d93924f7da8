#!/usr/bin/env python3
"""Goldens for --layer_config (tests/test_layer_config.cpp): how AutoRound 0.16.1 reads the text
(auto_round.utils.parse_layer_config_arg) and turns each key into a regex (to_standard_regex), and which
of a few layer names each regex finds (re.search, as its resolver matches keys).

  /work/arvenv/bin/python tools/make_layer_config_goldens.py tests/data/layer_config/goldens.json
"""
import json
import re
import sys

from auto_round.utils import parse_layer_config_arg, to_standard_regex

TEXTS = [
    '{"mlp.down_proj": {"bits": 8}}',
    "{mlp.down_proj:{bits:8},model.layers.0.self_attn.q_proj:BF16}",
    "{'self_attn': {'bits': '3', 'group_size': 64, 'sym': 'false'}}",
    "'{\"layers.1.mlp\": {\"bits\": 2}}'",
    '{"layers\\.[0-1]\\.mlp\\.down_proj$": {"bits": 8, "group_size": -1}}',
    "{ mlp.*gate : { scheme : W8A16 } , lm_head : {bits: 4, data_type: int} }",
    '{"experts.[0-3].down_proj": {"group_size": 32, "sym": true}}',
    "\u201c{mlp.up_proj:{bits:16}}\u201d",
    '{"^model.layers.1.": "W4A16", "mlp.gate$": {"bits": 16, "data_type": "fp"}}',
]
NAMES = [
    "model.layers.0.self_attn.q_proj",
    "model.layers.1.mlp.down_proj",
    "model.layers.10.mlp.down_proj",
    "model.layers.1.mlp.gate_proj",
    "model.layers.1.mlp.gate",
    "model.layers.0.mlp.experts.2.down_proj",
    "model.layers.0.mlp.experts.12.down_proj",
    "lm_head",
]

cases = []
for t in TEXTS:
    parsed = parse_layer_config_arg(t)
    regex = {k: to_standard_regex(k) for k in parsed}
    found = {k: [n for n in NAMES if re.search(r, n)] for k, r in regex.items()}
    cases.append({"text": t, "parsed": parsed, "regex": regex, "matches": found})
with open(sys.argv[1], "w") as f:
    json.dump({"names": NAMES, "cases": cases}, f, indent=1)
    f.write("\n")
