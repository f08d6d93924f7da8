"""Fixtures of the Python package's tests: the stories260K model converted once per session, and the
autoround CLI of the same build (the console script the wheel installs, or $AR_CLI) for comparisons."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autoround_cpp import _core, runner

REPO = Path(__file__).resolve().parents[2]


def fixtures_dir() -> Path | None:
    """AR_FIXTURES, else ../shared/fixtures beside the source tree (as the C++ tests find it)."""
    env = os.environ.get("AR_FIXTURES")
    for d in ([Path(env)] if env else []) + [REPO.parent / "shared" / "fixtures"]:
        if (d / "stories260K" / "stories260K.bin").is_file():
            return d
    return None


@pytest.fixture(scope="session")
def fixtures() -> Path:
    d = fixtures_dir()
    if d is None:
        pytest.skip("fixtures folder ../shared/fixtures not found; set AR_FIXTURES")
    return d


@pytest.fixture(scope="session")
def stories(fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """stories260K as an HF directory (autoround convert, run in-process)."""
    out = tmp_path_factory.mktemp("models") / "stories260K"
    src = fixtures / "stories260K"
    rc = runner.run(_core.run, ["convert", "--llama2c", str(src / "stories260K.bin"), "--tokenizer",
                                str(src / "tok512.bin"), "--out", str(out)])
    assert rc == 0
    return out


@pytest.fixture(scope="session")
def eval_text(fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 16 KiB of the TinyStories sample."""
    text = (fixtures / "text" / "tinystories" / "tinystories_sample.txt").read_bytes()[:16384]
    path = tmp_path_factory.mktemp("text") / "eval.txt"
    path.write_bytes(text[: text.rfind(b"\n") + 1])
    return path


@pytest.fixture(scope="session")
def cli() -> str:
    """The autoround executable of this build."""
    beside = Path(sys.executable).parent / "autoround"  # the venv's script, active or not
    path = os.environ.get("AR_CLI") or (str(beside) if beside.is_file() else shutil.which("autoround"))
    if not path:
        pytest.skip("no autoround CLI on PATH (pip install . puts it there; or set AR_CLI)")
    return path


def run_cli(cli: str, *args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([cli, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under root by its relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

