"""Errors by kind, refusals naming the keyword, and Ctrl-C stopping a run without leaving an output."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

import autoround_cpp
from autoround_cpp import AutoRound


def test_usage_error_names_the_option(stories: Path, tmp_path: Path) -> None:
    with pytest.raises(autoround_cpp.UsageError, match="--bits 5") as e:
        AutoRound(str(stories), bits=5).quantize_and_save(tmp_path / "o")
    assert isinstance(e.value, ValueError)
    assert not (tmp_path / "o").exists()


def test_missing_model_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "no_such_model")
    with pytest.raises(autoround_cpp.AutoRoundError, match="no_such_model"):
        AutoRound(missing).quantize_and_save(tmp_path / "o")


def test_invalid_model_is_invalid_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    with pytest.raises(autoround_cpp.InvalidInputError, match="config.json"):
        autoround_cpp.evaluate(bad, data="hello world")


def test_refused_keywords_are_named() -> None:
    with pytest.raises(ValueError, match="enable_alg_ext=True"):
        AutoRound("m", enable_alg_ext=True)
    with pytest.raises(ValueError, match="no_such_option"):
        AutoRound("m", no_such_option=1)
    AutoRound("m", enable_alg_ext=False, trust_remote_code=True)  # at rest / a note: accepted
    with pytest.raises(ValueError, match="platform"):
        AutoRound("m", platform="model_scope")
    with pytest.raises(ValueError, match="max_shard_size"):
        AutoRound("m").quantize_and_save("o", max_shard_size="1GB")


def test_model_objects() -> None:
    class Named:
        name_or_path = "org/name"

    class Config:
        _name_or_path = "some/dir"

    class WithConfig:
        config = Config()

    assert AutoRound(Named()).model == "org/name"
    assert AutoRound(WithConfig()).model == "some/dir"
    with pytest.raises(ValueError, match="without a name_or_path"):
        AutoRound(object())
    with pytest.raises(ValueError, match="tokenizer 'other'"):
        AutoRound("m", tokenizer="other")


def test_ctrl_c_stops_the_run_and_leaves_nothing(stories: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT during a SignRound run: KeyboardInterrupt, no output and no temporary left; then the next
    run works."""
    monkeypatch.chdir(tmp_path)
    # Ctrl-C as at a terminal: a job started in the background by a non-interactive shell inherits SIGINT
    # ignored, and Python then installs no handler.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ar = AutoRound(str(stories), iters=20000, nsamples=16, seqlen=64)  # runs well past the 4 s (1000 did not, on a Xeon)
    timer = threading.Timer(4.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            ar.quantize_and_save("out")
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert sorted(os.listdir(tmp_path)) == []
    AutoRound(str(stories), iters=0, nsamples=2, seqlen=32).quantize_and_save("after")
    assert (tmp_path / "after" / "config.json").is_file()
