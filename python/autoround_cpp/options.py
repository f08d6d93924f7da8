"""AutoRound's keywords as the autoround command line's options.

Each keyword maps to one CLI option (``KEYWORDS``), so a Python run and a CLI run with the same
options are the same run. A keyword equal to its default (auto_round's) passes nothing, and the CLI's
own default applies: AutoRound's defaults, offline (``docs/quantization.md``). Keywords whose value
the engine cannot honour raise ``ValueError`` naming them (``UNSUPPORTED``); a few that change nothing
here get the CLI's one-line note.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable


def _value(v: Any) -> list[str]:
    return [str(v)]


def _bool_word(v: Any) -> list[str]:
    return ["true" if v else "false"]


def _csv(v: Any) -> list[str]:
    return [v if isinstance(v, str) else ",".join(str(x) for x in v)]


@dataclass(frozen=True)
class Keyword:
    flag: str  # the CLI option it stands for
    default: Any  # auto_round's default: passes nothing
    value: Callable[[Any], list[str]] | None = _value  # the option's words; None: a bare flag
    when: Callable[[Any], bool] | None = None  # the flag is given when this holds (default: != default)


# keyword -> CLI option. The engine's own options (recipe, threads, ...) follow auto_round's.
KEYWORDS: dict[str, Keyword] = {
    "scheme": Keyword("--scheme", "W4A16"),
    "bits": Keyword("--bits", None),
    "group_size": Keyword("--group_size", None),
    "sym": Keyword("--asym", None, value=None, when=lambda v: v is False),
    "data_type": Keyword("--data_type", None),
    "act_bits": Keyword("--act_bits", None),
    "layer_config": Keyword("--layer_config", None, value=lambda v: [v if isinstance(v, str) else json.dumps(v)]),
    "iters": Keyword("--iters", None),
    "seqlen": Keyword("--seqlen", 2048),
    "nsamples": Keyword("--nsamples", 128),
    "batch_size": Keyword("--batch_size", 8),
    "gradient_accumulate_steps": Keyword("--gradient_accumulate_steps", None),
    "lr": Keyword("--lr", None),
    "minmax_lr": Keyword("--minmax_lr", None),
    "seed": Keyword("--seed", 42),
    "low_gpu_mem_usage": Keyword("--low_gpu_mem_usage", False, value=None),
    "enable_torch_compile": Keyword("--enable_torch_compile", None, value=None),
    "device_map": Keyword("--device_map", 0, value=lambda v: [str(v)]),
    "amp": Keyword("--amp", None, value=_bool_word),
    "enable_minmax_tuning": Keyword("--disable_minmax_tuning", True, value=None, when=lambda v: v is False),
    "enable_quanted_input": Keyword("--disable_quanted_input", True, value=None, when=lambda v: v is False),
    "not_use_best_mse": Keyword("--not_use_best_mse", False, value=None),
    "disable_opt_rtn": Keyword("--disable_opt_rtn", None, value=None),
    "quant_lm_head": Keyword("--quant_lm_head", False, value=None),
    "nblocks": Keyword("--nblocks", 1),
    "scale_dtype": Keyword("--scale_dtype", None),
    "model_dtype": Keyword("--model_dtype", None),
    "ignore_layers": Keyword("--ignore_layers", None, value=_csv),
    "fp_layers": Keyword("--fp_layers", None, value=_csv),
    "enable_deterministic_algorithms": Keyword("--deterministic", False, value=_bool_word),
    # autoround.cpp's own options, by their CLI names
    "recipe": Keyword("--recipe", None),
    "threads": Keyword("--threads", None),
    "parallel_quantization": Keyword("--parallel_quantization", None),
    "devices": Keyword("--devices", None, value=_csv),
    "deterministic": Keyword("--deterministic", None, value=_bool_word),
    "report": Keyword("--report", None, value=lambda v: [os.fspath(v)]),
    "resume": Keyword("--resume", False, value=None),
    "verbose": Keyword("--verbose", False, value=None),
    "overwrite": Keyword("--overwrite", True, value=None, when=lambda v: bool(v)),
}

# auto_round keywords the engine cannot honour, with the value that asks for nothing.
UNSUPPORTED: dict[str, Any] = {
    "schemes": None,  # AutoScheme
    "alg_configs": None,
    "algorithm": None,
    "enable_alg_ext": False,
    "enable_norm_bias_tuning": False,
    "enable_adam": False,
    "optimizer": None,
    "momentum": 0.0,
    "lr_scheduler": None,
    "dynamic_max_gap": -1,
    "enable_lfq": False,
    "enable_neuqi": False,
    "to_quant_block_names": None,
    "super_bits": None,
    "super_group_size": None,
    "act_group_size": None,
    "act_sym": None,
    "act_data_type": None,
    "act_dynamic": None,
    "model_free": False,
    "static_kv_dtype": None,
    "static_attention_dtype": None,
    "rotation_config": None,
    "quant_nontext_module": False,
    "processor": None,
    "image_processor": None,
}

# Keywords that change nothing here (the note says why); any value is accepted.
NOTES: dict[str, str] = {
    "low_cpu_mem_usage": "the engine always streams the model one block at a time",
    "trust_remote_code": "the engine runs no model code; architectures are built in",
    "platform": "models are read from local directories or the Hugging Face cache",
}


def cli_words(name: str, value: Any) -> list[str]:
    """The CLI words keyword ``name`` stands for at ``value`` ([] at its default)."""
    k = KEYWORDS[name]
    given = k.when(value) if k.when else (value is not None and value != k.default)
    if not given:
        return []
    if k.value is None:  # a bare flag: given by `when`, else by a true value
        return [k.flag] if k.when or value else []
    return [k.flag, *k.value(value)]


def refused(kwargs: dict[str, Any]) -> list[str]:
    """Keywords of ``kwargs`` the engine cannot honour: unknown ones and UNSUPPORTED ones not at rest."""
    bad = []
    for name, value in kwargs.items():
        if name in KEYWORDS or name in NOTES:
            continue
        if name not in UNSUPPORTED:
            bad.append(f"{name} (not an AutoRound option autoround.cpp knows)")
        elif value != UNSUPPORTED[name]:
            bad.append(f"{name}={value!r} (not supported by autoround.cpp)")
    return bad
