"""evaluate() returns `eval --json`'s figures, logits() the CLI's logits; logging carries the run."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import autoround_cpp
from autoround_cpp import AutoRound
from conftest import run_cli


@pytest.fixture(scope="module")
def quantized(stories: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("q") / "w4"
    AutoRound(str(stories), iters=0, nsamples=8, seqlen=64).quantize_and_save(out)
    return out


def test_evaluate_matches_the_cli(quantized: Path, stories: Path, eval_text: Path, cli: str) -> None:
    figures = autoround_cpp.evaluate(quantized, ref_model=stories, text=eval_text, ctx=128)
    r = run_cli(cli, "eval", "--model", str(quantized), "--ref-model", str(stories), "--text", str(eval_text),
                "--ctx", "128", "--json")
    assert r.returncode == 0, r.stderr
    assert figures == json.loads(r.stdout)
    assert 0 < figures["kl_mean"] < 1 and figures["tokens"] > 0
    alone = autoround_cpp.evaluate(stories, data=eval_text.read_text(), ctx=128)
    assert alone["ppl"] == pytest.approx(figures["ref_ppl"])


def test_logits_match_the_cli(stories: Path, cli: str, tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    text = "Once upon a time"
    array, ids = autoround_cpp.logits(stories, text, return_ids=True)
    r = run_cli(cli, "logits", "--model", str(stories), "--text", text, "--out", str(tmp_path / "l.bin"))
    assert r.returncode == 0, r.stderr
    assert array.shape == (len(ids), 512) and array.dtype == np.float32
    assert np.array_equal(array, np.fromfile(tmp_path / "l.bin", dtype=np.float32).reshape(array.shape))
    assert ids == [int(x) for x in (tmp_path / "l.bin.ids").read_text().split()]


def test_progress_and_lines_reach_logging(stories: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="autoround_cpp")
    AutoRound(str(stories), iters=0, nsamples=2, seqlen=32).quantize_and_save(tmp_path / "o")
    messages = [r.getMessage() for r in caplog.records if r.name == "autoround_cpp"]
    assert any(m.startswith("running: autoround quantize --model") for m in messages)
    assert any("model: stories260K" in m or "model:" in m for m in messages)
    assert any(m.startswith("total:") for m in messages), messages[-5:]


def test_openblas_runs_the_clis_core(stories: Path, cli: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The start summary's ISA line, OpenBLAS's core included, is the CLI's: the package sets OPENBLAS_CORETYPE
    before its module loads OpenBLAS where the CLI restarts itself with it (a CPU OpenBLAS does not know)."""
    from autoround_cpp import _core, runner

    args = ["--model", str(stories), "--iters", "1", "--nsamples", "2", "--seqlen", "16", "--overwrite"]
    with caplog.at_level(logging.INFO, logger="autoround_cpp"):
        assert runner.run(_core.run, ["quantize", *args, "--output_dir", str(tmp_path / "py")]) == 0
    ours = [r.getMessage() for r in caplog.records if r.getMessage().startswith("isa: ")]
    r = run_cli(cli, "quantize", *args, "--output_dir", str(tmp_path / "cli"))
    assert r.returncode == 0, r.stderr
    theirs = [line.split("] ", 1)[1] for line in r.stderr.splitlines() if "] isa: " in line]
    assert ours and ours == theirs
