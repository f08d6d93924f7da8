"""Every AutoRound keyword maps to the CLI option it claims: the option exists in `autoround quantize
--help`, the keyword's value becomes that option's words, and a run with several keywords writes the
bytes of the CLI run with their options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoround_cpp import AutoRound, options
from conftest import run_cli, tree_bytes

# A value other than the default for every keyword, and the words it must give.
SAMPLES = {
    "scheme": ("W2A16", ["--scheme", "W2A16"]),
    "bits": (8, ["--bits", "8"]),
    "group_size": (32, ["--group_size", "32"]),
    "sym": (False, ["--asym"]),
    "data_type": ("int", ["--data_type", "int"]),
    "act_bits": (16, ["--act_bits", "16"]),
    "layer_config": ({"mlp.down_proj": {"bits": 8}}, ["--layer_config", '{"mlp.down_proj": {"bits": 8}}']),
    "iters": (0, ["--iters", "0"]),
    "seqlen": (64, ["--seqlen", "64"]),
    "nsamples": (16, ["--nsamples", "16"]),
    "batch_size": (4, ["--batch_size", "4"]),
    "gradient_accumulate_steps": (2, ["--gradient_accumulate_steps", "2"]),
    "lr": (0.005, ["--lr", "0.005"]),
    "minmax_lr": (0.002, ["--minmax_lr", "0.002"]),
    "seed": (7, ["--seed", "7"]),
    "low_gpu_mem_usage": (True, ["--low_gpu_mem_usage"]),
    "enable_torch_compile": (True, ["--enable_torch_compile"]),
    "device_map": ("cpu", ["--device_map", "cpu"]),
    "amp": (False, ["--amp", "false"]),
    "enable_minmax_tuning": (False, ["--disable_minmax_tuning"]),
    "enable_quanted_input": (False, ["--disable_quanted_input"]),
    "not_use_best_mse": (True, ["--not_use_best_mse"]),
    "disable_opt_rtn": (True, ["--disable_opt_rtn"]),
    "quant_lm_head": (True, ["--quant_lm_head"]),
    "nblocks": (2, ["--nblocks", "2"]),
    "scale_dtype": ("fp16", ["--scale_dtype", "fp16"]),
    "model_dtype": ("bf16", ["--model_dtype", "bf16"]),
    "ignore_layers": (["lm_head", "mlp"], ["--ignore_layers", "lm_head,mlp"]),
    "fp_layers": ("mlp", ["--fp_layers", "mlp"]),
    "enable_deterministic_algorithms": (True, ["--deterministic", "true"]),
    "recipe": ("light", ["--recipe", "light"]),
    "threads": (2, ["--threads", "2"]),
    "parallel_quantization": ("auto", ["--parallel_quantization", "auto"]),
    "devices": (["cpu:0", "cpu:1"], ["--devices", "cpu:0,cpu:1"]),
    "deterministic": (False, ["--deterministic", "false"]),
    "report": ("r.json", ["--report", "r.json"]),
    "resume": (True, ["--resume"]),
    "verbose": (True, ["--verbose"]),
    "overwrite": (True, ["--overwrite"]),
}


def test_every_keyword_has_a_sample() -> None:
    assert set(SAMPLES) == set(options.KEYWORDS)


@pytest.fixture(scope="module")
def quantize_help(cli: str) -> str:
    r = run_cli(cli, "quantize", "--help")
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("name", sorted(options.KEYWORDS))
def test_keyword_gives_its_option(name: str, quantize_help: str) -> None:
    value, words = SAMPLES[name]
    assert options.cli_words(name, value) == words
    flag = options.KEYWORDS[name].flag
    assert f"{flag}" in quantize_help.replace(",", " ").split() or f"{flag} " in quantize_help, flag
    args = AutoRound("some/model", **{name: value}).command_line("out")
    start = args.index(words[0])
    assert args[start:start + len(words)] == words


def test_defaults_pass_nothing_but_overwrite() -> None:
    assert AutoRound("m").command_line("out") == ["autoround", "quantize", "--model", "m", "--overwrite",
                                                  "--output_dir", "out"]


def test_scheme_forms() -> None:
    assert AutoRound("m", scheme="GGUF:Q4_K_M").command_line("o")[-2:] == ["--format", "gguf:q4_k_m"]
    args = AutoRound("m", scheme={"bits": 8, "group_size": 64, "sym": False}).command_line("o")
    assert args[4:9] == ["--bits", "8", "--group_size", "64", "--asym"]
    with pytest.raises(ValueError, match="scheme: keys"):
        AutoRound("m", scheme={"bits": 4, "act_dynamic": True})
    assert AutoRound("m", device="cpu").command_line("o")[4:6] == ["--device_map", "cpu"]


def test_options_run_as_the_cli_runs(stories: Path, cli: str, tmp_path: Path) -> None:
    """Many keywords at once, with a list-of-strings dataset: the CLI with the same options (and the
    same texts as a JSONL file) writes the same bytes."""
    texts = [f"Once upon a time there was a little {w} who liked to play in the park with friends." * 4
             for w in ("cat", "dog", "girl", "boy", "bird", "fish", "tree", "ball")]
    kw = dict(bits=8, group_size=32, sym=False, iters=2, nsamples=8, seqlen=32, batch_size=4, seed=7, lr=0.01,
              layer_config={"self_attn.o_proj": {"bits": 4}}, amp=False, enable_minmax_tuning=False)
    AutoRound(str(stories), dataset=texts, **kw).quantize_and_save(tmp_path / "py", format="auto_gptq")
    jsonl = tmp_path / "texts.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    r = run_cli(cli, "--model", str(stories), "--bits", "8", "--group_size", "32", "--asym", "--iters", "2",
                "--nsamples", "8", "--seqlen", "32", "--batch_size", "4", "--seed", "7", "--lr", "0.01",
                "--layer_config", '{"self_attn.o_proj": {"bits": 4}}', "--amp", "false", "--disable_minmax_tuning",
                "--dataset", str(jsonl), "--format", "auto_gptq", "--output_dir", str(tmp_path / "cli"))
    assert r.returncode == 0, r.stderr
    assert tree_bytes(tmp_path / "py") == tree_bytes(tmp_path / "cli")


def test_quantize_then_save(stories: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ar = AutoRound(str(stories), iters=0, nsamples=4, seqlen=32)
    ar.quantize()
    with pytest.raises(ValueError, match="quantize\\(\\) made auto_round"):
        ar.save_quantized("q", format="auto_gptq")
    assert ar.save_quantized("q", format="auto_round") == "q"
    assert (tmp_path / "q" / "config.json").is_file()
    assert not list(tmp_path.glob("tmp_autoround_cpp_*"))
    direct = AutoRound(str(stories), iters=0, nsamples=4, seqlen=32).quantize_and_save(tmp_path / "d")
    assert tree_bytes(tmp_path / "q") == tree_bytes(Path(direct))
