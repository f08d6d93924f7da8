"""What AutoRound's ``model`` and ``dataset`` may be, as the command line's --model and --dataset."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any

logger = logging.getLogger("autoround_cpp")


def model_arg(model: Any, what: str = "model") -> str:
    """A directory, a GGUF file or a Hugging Face cache name ("org/name", resolved as the CLI resolves
    it, nothing downloaded); or a transformers model or tokenizer whose ``name_or_path`` is one."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    name = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None)
    if isinstance(name, str) and name:
        logger.info("%s: reading %s from its files (%s), not the object in memory", what, type(model).__name__, name)
        return name
    raise ValueError(
        f"{what}: a {type(model).__name__} without a name_or_path to read it from; pass the model's directory "
        "or Hugging Face name (save_pretrained(DIR) writes one)"
    )


def _is_token_ids(item: Any) -> bool:
    if isinstance(item, str):
        return False
    if hasattr(item, "tolist") or isinstance(item, dict):
        return True
    return isinstance(item, (list, tuple)) and all(isinstance(x, int) for x in item)


def check_dataset(dataset: Any) -> None:
    """Raises ValueError for a dataset that cannot be passed as --dataset."""
    if dataset is None or isinstance(dataset, (str, os.PathLike)):
        return
    if not isinstance(dataset, (list, tuple)):
        raise ValueError(
            f"dataset: a {type(dataset).__name__} cannot be read here; pass a file or directory (plain text, "
            "JSONL), a --dataset spec (PATH:concat=true:num=N,...) or a list of strings"
        )
    if not dataset:
        raise ValueError("dataset: an empty list")
    if any(_is_token_ids(x) for x in dataset):
        raise ValueError(
            "dataset: token ids are not supported yet (the engine tokenizes text with the model's tokenizer); "
            "pass the texts as a list of strings, or a file"
        )
    bad = [i for i, x in enumerate(dataset) if not isinstance(x, str)]
    if bad:
        raise ValueError(f"dataset: item {bad[0]} is a {type(dataset[bad[0]]).__name__}, not a string")


class Dataset:
    """--dataset for one run: a spec passed as it is, or a list of texts written to a temporary JSONL
    file (one sample per text, as auto_round takes a list of strings). Use as a context manager."""

    def __init__(self, dataset: Any) -> None:
        check_dataset(dataset)
        self._tmp: str | None = None
        self.spec: str | None = None
        if dataset is None:
            return
        if isinstance(dataset, (str, os.PathLike)):
            self.spec = os.fspath(dataset)
            return
        fd, self._tmp = tempfile.mkstemp(prefix="autoround_cpp_dataset_", suffix=".jsonl")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for text in dataset:
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        self.spec = self._tmp

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._tmp:
            os.unlink(self._tmp)
            self._tmp = None
