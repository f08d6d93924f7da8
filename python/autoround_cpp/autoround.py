"""``AutoRound``: auto_round's class, run by autoround.cpp's engine in this process.

    from autoround_cpp import AutoRound
    ar = AutoRound("Qwen/Qwen3-0.6B", scheme="W4A16")
    ar.quantize_and_save(output_dir="./qmodel", format="auto_round")

Keywords carry auto_round's names and defaults and map one to one to the CLI's options
(``options.KEYWORDS``); ``command_line()`` shows the CLI command of the same run.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import tempfile
import weakref
from typing import Any

from . import _core, options, runner
from .errors import AutoRoundError, UsageError
from .inputs import Dataset, check_dataset, model_arg

logger = logging.getLogger("autoround_cpp")

_SCHEME_KEYS = ("bits", "group_size", "sym", "data_type", "act_bits")
_MARKER = "autoround_output.json"  # the engine's mark on its outputs (src/io/output_guard.h)


class AutoRound:
    """Quantizes ``model`` with SignRound. ``model``: a directory or a Hugging Face cache name
    ("org/name", never downloaded), or a transformers model whose ``name_or_path`` is one of those.
    ``dataset``: a file, directory or ``--dataset`` spec, a list of strings, or token ids as auto_round
    takes them (lists, arrays or tensors, dicts with input_ids, a DataLoader of those); default: the
    built-in corpus. ``overwrite=True`` (the CLI's ``--overwrite``) lets a rerun replace an earlier output."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        platform: str = "hf",
        scheme: Any = "W4A16",
        bits: int | None = None,
        group_size: int | None = None,
        sym: bool | None = None,
        layer_config: dict | str | None = None,
        dataset: Any = None,
        iters: int | None = None,
        seqlen: int = 2048,
        nsamples: int = 128,
        batch_size: int = 8,
        gradient_accumulate_steps: int | None = None,
        lr: float | None = None,
        minmax_lr: float | None = None,
        low_gpu_mem_usage: bool = False,
        device_map: Any = 0,
        enable_torch_compile: bool | None = None,
        seed: int = 42,
        low_cpu_mem_usage: bool = True,
        amp: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if platform != "hf":
            raise ValueError(f"platform={platform!r}: only 'hf' (local directories, the Hugging Face cache)")
        self.model = model_arg(model)
        if tokenizer is not None:
            self._check_tokenizer(tokenizer)
        device = kwargs.pop("device", None)  # auto_round's older name
        if device is not None and device_map in (0, None):
            device_map = device
        self.format = kwargs.pop("format", None)
        kw = dict(bits=bits, group_size=group_size, sym=sym, layer_config=layer_config, iters=iters,
                  seqlen=seqlen, nsamples=nsamples, batch_size=batch_size,
                  gradient_accumulate_steps=gradient_accumulate_steps, lr=lr, minmax_lr=minmax_lr,
                  low_gpu_mem_usage=low_gpu_mem_usage, device_map=device_map,
                  enable_torch_compile=enable_torch_compile, seed=seed, amp=amp)
        self.scheme = self._apply_scheme(scheme, kw)
        kw.update(kwargs)
        bad = options.refused(kw)
        if bad:
            raise ValueError("AutoRound: " + "; ".join(bad))
        if not low_cpu_mem_usage:
            logger.info("low_cpu_mem_usage=False changes nothing here: %s", options.NOTES["low_cpu_mem_usage"])
        for name in ("trust_remote_code",):
            if name in kw:
                logger.info("%s changes nothing here: %s", name, options.NOTES[name])
        self._words: list[str] = []  # in KEYWORDS' order; a keyword not given stands at its default
        for name, k in options.KEYWORDS.items():
            self._words += options.cli_words(name, kw.get(name, k.default))
        self.dataset = dataset
        check_dataset(dataset)  # before any run
        self._quantized: tuple[str, str | None] | None = None  # (temporary output, its format)

    def _check_tokenizer(self, tokenizer: Any) -> None:
        name = tokenizer if isinstance(tokenizer, (str, os.PathLike)) else getattr(tokenizer, "name_or_path", None)
        if name and os.fspath(name) != self.model:
            raise ValueError(f"tokenizer {os.fspath(name)!r}: the engine reads the tokenizer of the model "
                             f"({self.model!r}); a different one cannot be used")
        logger.info("tokenizer: the engine reads the model's own tokenizer files (%s)", self.model)

    def _apply_scheme(self, scheme: Any, kw: dict[str, Any]) -> str | None:
        """Returns the --scheme value; a dict scheme sets its keys; GGUF:<preset> is the gguf format."""
        if isinstance(scheme, dict):
            unknown = sorted(set(scheme) - set(_SCHEME_KEYS))
            if unknown:
                raise ValueError(f"scheme: keys {unknown} are not supported (only {list(_SCHEME_KEYS)})")
            for key, value in scheme.items():
                if kw.get(key) is None:
                    kw[key] = value
            return None
        if not isinstance(scheme, str):
            raise ValueError(f"scheme: a {type(scheme).__name__}; pass a scheme name (W4A16, ...) or a dict")
        if scheme.upper().startswith("GGUF:"):
            if self.format is None:
                self.format = scheme.lower()
            return None
        kw["scheme"] = scheme
        return scheme

    def command_line(self, output_dir: str = "tmp_autoround", format: str | None = None) -> list[str]:
        """The ``autoround`` command of the run that quantize_and_save(output_dir, format) makes (with
        the dataset as given; other datasets are written to a temporary JSONL file for the run)."""
        d = self.dataset
        if d is None or isinstance(d, (str, os.PathLike)):
            return self._args(output_dir, format, None if d is None else os.fspath(d))
        texts = isinstance(d, (list, tuple)) and isinstance(d[0], str)
        return self._args(output_dir, format, "<dataset.jsonl>" + ("" if texts else ":field=input_ids"))

    def _args(self, output_dir: Any, format: str | None, dataset_spec: str | None) -> list[str]:
        args = ["quantize", "--model", self.model, *self._words, "--output_dir", os.fspath(output_dir)]
        fmt = format or self.format
        if fmt:
            args += ["--format", fmt]
        if dataset_spec:
            args += ["--dataset", dataset_spec]
        return ["autoround", *args]

    def _run(self, output_dir: Any, format: str | None) -> None:
        runner.ensure_handler()
        with Dataset(self.dataset) as ds:
            args = self._args(output_dir, format, ds.spec)
            logger.info("running: %s", shlex.join(args))
            try:
                rc = runner.run(_core.run, args[1:])
            except AutoRoundError as e:  # "TMPFILE:LINE: ..." names the dataset's item instead
                raise type(e)(ds.describe(str(e))) from None
        if rc != 0:
            raise UsageError(f"autoround exited with {rc}: {shlex.join(args)}")

    def quantize_and_save(self, output_dir: Any = "tmp_autoround", format: str | None = None, inplace: bool = True,
                          max_shard_size: Any = None, **kwargs: Any) -> str:
        """Quantizes and writes ``output_dir`` (one subdirectory per format when several are given, as
        auto_round names them); returns ``output_dir``. ``inplace`` changes nothing here."""
        _check_save_options(max_shard_size, kwargs)
        self._run(output_dir, format)
        return os.fspath(output_dir)

    def quantize(self) -> "AutoRound":
        """Runs the quantization now, into a temporary directory in the current one, in the format given
        to AutoRound(format=...) (default auto_round); save_quantized() moves it to its place. (The engine
        writes each block as it is tuned, so the output is on disk, not in memory.)"""
        self._discard()
        tmp = tempfile.mkdtemp(prefix="tmp_autoround_cpp_", dir=".")
        self._finalizer = weakref.finalize(self, shutil.rmtree, tmp, True)
        out = os.path.join(tmp, "out")
        self._run(out, None)
        self._quantized = (out, self.format)
        return self

    def save_quantized(self, output_dir: Any = None, format: str | None = None, inplace: bool = True,
                       return_folders: bool = False, max_shard_size: Any = None, **kwargs: Any) -> str:
        """Moves what quantize() wrote to ``output_dir`` (default tmp_autoround); quantizes first if
        quantize() did not run. Returns ``output_dir``."""
        _check_save_options(max_shard_size, kwargs)
        target = os.fspath(output_dir if output_dir is not None else "tmp_autoround")
        if self._quantized is None:
            return self.quantize_and_save(target, format)
        out, made = self._quantized
        if format is not None and format != (made or "auto_round"):
            raise ValueError(f"save_quantized(format={format!r}): quantize() made {made or 'auto_round'}; pass "
                             f"format={format!r} to AutoRound(...) or call quantize_and_save(format={format!r})")
        _clear_target(target)
        shutil.move(out, target)
        self._discard()
        return target

    def _discard(self) -> None:
        if getattr(self, "_finalizer", None) is not None:
            self._finalizer()
            self._finalizer = None
        self._quantized = None


def _check_save_options(max_shard_size: Any, kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise ValueError(f"save options not supported by autoround.cpp: {sorted(kwargs)}")
    if max_shard_size not in (None, "5GB", 5 * 10**9):
        raise ValueError(f"max_shard_size={max_shard_size!r}: the engine writes shards of at most 5 GB")


def _clear_target(target: str) -> None:
    """An existing target is replaced only when empty or an earlier output of the engine's (its mark)."""
    if not os.path.lexists(target):
        return
    if os.path.isdir(target) and not os.path.islink(target):
        if not os.listdir(target):
            os.rmdir(target)
            return
        if os.path.isfile(os.path.join(target, _MARKER)):
            shutil.rmtree(target)
            return
    raise FileExistsError(f"{target}: exists and is not an earlier output of autoround.cpp (no {_MARKER})")
