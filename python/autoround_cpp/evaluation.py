"""``evaluate`` and ``logits``: the CLI's ``eval`` and ``logits`` for notebooks."""

from __future__ import annotations

import json
import os
from typing import Any

from . import _core, runner
from .inputs import model_arg


def evaluate(model: Any, ref_model: Any = None, text: Any = None, *, data: str | None = None,
             text_field: str = "text", ctx: int = 0, batch: int = 4, threads: int = 0) -> dict[str, Any]:
    """``autoround eval --json``'s figures as a dict: perplexity over llama.cpp's windows (``ppl``,
    ``ppl_stderr``, ``tokens``, ...), and with ``ref_model`` (the unquantized model) the KL divergence
    (``kl_mean``, ``kl_median``, ``kl_p99``, ``kl_max``), ``top1_agreement`` and ``delta_ppl``.
    ``text``: a plain file, JSONL (the text in ``text_field``) or a directory of them; or ``data``: the
    text itself. ``ctx`` 0: min(512, the model's context)."""
    if (text is None) == (data is None):
        raise ValueError("evaluate: pass text= (a file or directory) or data= (the text itself)")
    if ctx != 0 and ctx < 2:
        raise ValueError(f"evaluate: ctx={ctx} (0 for the default, or at least 2)")
    if batch < 1 or threads < 0:
        raise ValueError(f"evaluate: batch={batch}, threads={threads} (batch >= 1, threads >= 0)")
    path = os.fspath(text) if text is not None else ""
    ref = model_arg(ref_model, "ref_model") if ref_model is not None else ""
    figures = runner.run(_core.evaluate, model_arg(model), ref, path, text_field, data or "", ctx, batch, threads)
    return json.loads(figures)


def logits(model: Any, text: str, return_ids: bool = False) -> Any:
    """The model's fp32 logits for ``text`` (encoded with the model's tokenizer and special tokens) as
    a numpy array [tokens, vocab]; with ``return_ids`` also the token ids. Needs numpy."""
    try:
        import numpy as np
    except ImportError as e:
        raise ImportError("autoround_cpp.logits returns a numpy array: pip install numpy") from e
    data, ids, vocab = runner.run(_core.logits, model_arg(model), text)
    array = np.frombuffer(data, dtype=np.float32).reshape(len(ids), vocab)
    return (array, list(ids)) if return_ids else array
