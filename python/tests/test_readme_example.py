"""AutoRound's README example, its import line changed to autoround_cpp, quantizes stories260K (named
Qwen/Qwen3-0.6B in a Hugging Face cache made for the test) and writes the bytes the CLI writes."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import pytest

from conftest import run_cli, tree_bytes

# auto-round 0.16.1's README, "API Usage", verbatim but for its first line.
README_EXAMPLE = '''\
from autoround_cpp import AutoRound

# Load a model (supports FP8/BF16/FP16/FP32)
model_name_or_path = "Qwen/Qwen3-0.6B"

# Available schemes: "W2A16", "W3A16", "W4A16", "W8A16", "NVFP4", "MXFP4" (no real kernels), "GGUF:Q4_K_M", etc.
ar = AutoRound(model_name_or_path, scheme="W4A16")

# Highest accuracy (4–5× slower).
# `low_gpu_mem_usage=True` saves ~20GB VRAM but runs ~30%-100% slower.
# ar = AutoRound(model_name_or_path, nsamples=512, iters=1000, low_gpu_mem_usage=True)

# Faster quantization (2–3× speedup) with slight accuracy drop at W4G128.
# ar = AutoRound(model_name_or_path, nsamples=128, iters=50, lr=5e-3)

# Supported formats: "auto_round" (default), "auto_gptq", "auto_awq", "llm_compressor", "gguf:q4_k_m", etc.
ar.quantize_and_save(output_dir="./qmodel", format="auto_round")
'''


def hub_cache(root: Path, name: str, model_dir: Path) -> Path:
    """A Hugging Face cache holding model_dir's files as `name` (models--org--name/snapshots/<rev>)."""
    repo = root / ("models--" + name.replace("/", "--"))
    snap = repo / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    for f in model_dir.iterdir():
        (snap / f.name).symlink_to(f)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")
    return root


def test_readme_example_writes_the_clis_bytes(stories: Path, cli: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    cache = hub_cache(tmp_path / "hub", "Qwen/Qwen3-0.6B", stories)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "example.py").write_text(README_EXAMPLE, encoding="utf-8")
    runpy.run_path(str(tmp_path / "example.py"), run_name="__main__")
    python_out = tree_bytes(tmp_path / "qmodel")
    assert "config.json" in python_out and any(name.endswith(".safetensors") for name in python_out)

    r = run_cli(cli, "--model", "Qwen/Qwen3-0.6B", "--scheme", "W4A16", "--output_dir", "cli_qmodel",
                "--format", "auto_round", cwd=tmp_path, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert python_out == tree_bytes(tmp_path / "cli_qmodel")
