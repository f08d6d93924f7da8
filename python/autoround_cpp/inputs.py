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


def _rows(item: Any, where: str) -> list[tuple[str, list[int]]]:
    """The token-id samples in one dataset item, each with its label: a list of ints, a 1-D or 2-D
    array or tensor (rows), a dict or BatchEncoding with ``input_ids`` (positions whose
    ``attention_mask`` is 0, padding, are dropped), or a tuple whose first element is one of those."""
    if isinstance(item, tuple) and item and not isinstance(item[0], int):
        item = item[0]  # auto_round's loop passes a tuple's elements as the model's arguments
    mask = None
    if hasattr(item, "data") and isinstance(getattr(item, "data"), dict):  # BatchEncoding
        item = item.data
    if isinstance(item, dict):
        if "input_ids" not in item:
            raise ValueError(f"dataset: {where} is a dict without 'input_ids' (keys {sorted(map(str, item))[:6]})")
        mask = item.get("attention_mask")
        item = item["input_ids"]
    ids = item.tolist() if hasattr(item, "tolist") else item
    if mask is not None and hasattr(mask, "tolist"):
        mask = mask.tolist()
    if not isinstance(ids, (list, tuple)) or not ids:
        raise ValueError(f"dataset: {where} is a {type(item).__name__}, not text or token ids")
    batch = isinstance(ids[0], (list, tuple))  # 2-D: one sample per row
    rows = list(ids) if batch else [ids]
    masks = None if mask is None else (list(mask) if batch else [mask])
    out = []
    for r, row in enumerate(rows):
        label = where if len(rows) == 1 else f"{where}[{r}]"
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in row):
            bad = next(t for t in row if not (isinstance(t, int) and not isinstance(t, bool) and t >= 0))
            raise ValueError(f"dataset: {label} holds {bad!r}, not a token id (a non-negative integer)")
        if masks is not None:
            m = masks[r] if r < len(masks) else []
            if len(m) != len(row):
                raise ValueError(f"dataset: {label}: attention_mask has {len(m)} entries for {len(row)} ids")
            row = [t for t, keep in zip(row, m) if keep]
        out.append((label, list(row)))
    return out


def check_dataset(dataset: Any) -> None:
    """Raises ValueError for a dataset that cannot be passed as --dataset (a list or tuple is checked
    item by item now; any other iterable, such as a DataLoader, as it is read at the run)."""
    if dataset is None or isinstance(dataset, (str, os.PathLike)):
        return
    if not hasattr(dataset, "__iter__") or isinstance(dataset, (bytes, dict)):
        raise ValueError(
            f"dataset: a {type(dataset).__name__} cannot be read here; pass a file or directory (plain text, "
            "JSONL), a --dataset spec (PATH:concat=true:num=N,...), a list of strings, or token ids (lists, "
            "arrays, tensors, dicts with input_ids, a DataLoader of those)"
        )
    if isinstance(dataset, (list, tuple)):
        if not dataset:
            raise ValueError("dataset: an empty list")
        _Writer(None).add_all(dataset)


class _Writer:
    """Writes a dataset's items to a JSONL file (None: only checks them): strings as {"text": ...},
    token ids as {"input_ids": [...]}. One kind per dataset, as the engine reads one field per source."""

    def __init__(self, f: Any) -> None:
        self.f, self.kind, self.labels = f, None, []

    def add_all(self, dataset: Any) -> None:
        for i, item in enumerate(dataset):
            self.add(item, f"dataset[{i}]")
        if not self.labels:
            raise ValueError("dataset: it holds no samples")

    def add(self, item: Any, where: str) -> None:
        kind = "text" if isinstance(item, str) else "input_ids"
        if self.kind is None:
            self.kind = kind
        elif kind != self.kind:
            raise ValueError(f"dataset: {where} is {'text' if kind == 'text' else 'token ids'} but the items "
                             f"before are {'text' if self.kind == 'text' else 'token ids'}; use one kind")
        for label, value in [(where, item)] if kind == "text" else _rows(item, where):
            self.labels.append(label)
            if self.f is not None:
                self.f.write(json.dumps({kind: value}, ensure_ascii=False) + "\n")


class Dataset:
    """--dataset for one run: a spec passed as it is, or the items of a list or other iterable
    written to a temporary JSONL file, one sample per line (texts are tokenized by the engine with
    the model's tokenizer; token ids are used as they are: a sample shorter than seqlen is skipped,
    as auto_round skips it, a longer one gives its first seqlen ids). Use as a context manager."""

    def __init__(self, dataset: Any) -> None:
        check_dataset(dataset)
        self._tmp: str | None = None
        self.spec: str | None = None
        self._labels: list[str] = []
        if dataset is None:
            return
        if isinstance(dataset, (str, os.PathLike)):
            self.spec = os.fspath(dataset)
            return
        fd, self._tmp = tempfile.mkstemp(prefix="autoround_cpp_dataset_", suffix=".jsonl")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                writer = _Writer(f)
                writer.add_all(dataset)
        except BaseException:
            self.__exit__()
            raise
        self._labels = writer.labels
        self.spec = self._tmp if writer.kind == "text" else self._tmp + ":field=input_ids"

    def describe(self, message: str) -> str:
        """An engine message about the temporary file, with "FILE:LINE:" read as the dataset's item."""
        if not self._tmp or not message.startswith(self._tmp + ":"):
            return message
        line, _, rest = message[len(self._tmp) + 1:].partition(":")
        if line.isdigit() and 0 < int(line) <= len(self._labels):
            return f"dataset: {self._labels[int(line) - 1]}:{rest}"
        return message

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._tmp:
            os.unlink(self._tmp)
            self._tmp = None
