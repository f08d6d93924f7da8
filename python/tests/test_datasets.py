"""Datasets as auto_round takes them: a list of strings, token ids (lists, arrays, dicts with
input_ids and attention_mask, a DataLoader-like iterable), and their refusals. Token ids that are a
text's own encoding write the bytes of the run on that text."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from autoround_cpp import AutoRound, InvalidInputError, logits
from conftest import tree_bytes

TEXTS = [f"Once upon a time a little {w} found a shiny stone near the river and showed it to mom." * 2
         for w in ("cat", "dog", "girl", "boy", "bird", "fish")]
KW = dict(bits=4, group_size=32, iters=2, nsamples=6, seqlen=32, batch_size=2, seed=3)


@pytest.fixture(scope="module")
def ids(stories: Path) -> list[list[int]]:
    """Each text's token ids as the engine encodes it (with the tokenizer's special tokens)."""
    pytest.importorskip("numpy")
    return [logits(str(stories), t, return_ids=True)[1] for t in TEXTS]


def test_refusals() -> None:
    cases = [
        ([[1, 2], "text"], "dataset\\[1\\] is text but the items before are token ids"),
        (["text", [1, 2]], "dataset\\[1\\] is token ids but the items before are text"),
        ([[1, -2]], "dataset\\[0\\] holds -2, not a token id"),
        ([[1, 2.5]], "dataset\\[0\\] holds 2.5"),
        ([[True, 2]], "dataset\\[0\\] holds True"),
        ([{"ids": [1]}], "dataset\\[0\\] is a dict without 'input_ids'"),
        ([{"input_ids": [1, 2], "attention_mask": [1]}], "attention_mask has 1 entries for 2 ids"),
        ([3], "dataset\\[0\\] is a int, not text or token ids"),
        ([[]], "dataset\\[0\\] is a list, not text or token ids"),
        ([], "an empty list"),
        (42, "cannot be read here"),
        ({"input_ids": [1]}, "cannot be read here"),
    ]
    for dataset, message in cases:
        with pytest.raises(ValueError, match=message):
            AutoRound("m", dataset=dataset)
    assert AutoRound("m", dataset=[[1, 2]]).command_line("o")[-2:] == ["--dataset", "<dataset.jsonl>:field=input_ids"]
    assert AutoRound("m", dataset=["a"]).command_line("o")[-2:] == ["--dataset", "<dataset.jsonl>"]
    assert AutoRound("m", dataset="data.txt:num=4").command_line("o")[-2:] == ["--dataset", "data.txt:num=4"]


def test_token_ids_write_the_bytes_of_their_text(stories: Path, ids: list[list[int]], tmp_path: Path) -> None:
    assert all(len(x) >= KW["seqlen"] for x in ids)
    AutoRound(str(stories), dataset=TEXTS, **KW).quantize_and_save(tmp_path / "text")
    AutoRound(str(stories), dataset=ids, **KW).quantize_and_save(tmp_path / "ids")
    assert tree_bytes(tmp_path / "ids") == tree_bytes(tmp_path / "text")


def test_every_token_id_shape_gives_the_same_samples(stories: Path, ids: list[list[int]], tmp_path: Path) -> None:
    """Arrays, 2-D batches, dicts with a padding mask, tuples and a one-pass iterable (as a DataLoader
    yields) all reduce to the same samples."""
    np = pytest.importorskip("numpy")
    n = min(map(len, ids))
    same = [x[:n] for x in ids]  # equal lengths for the 2-D forms; the first seqlen ids are what counts
    padded = [{"input_ids": np.array(x + [0, 0]), "attention_mask": np.array([1] * len(x) + [0, 0])} for x in same]
    forms = {
        "lists": same,
        "arrays": [np.array(x, dtype=np.int64) for x in same],
        "batches": [np.array(same[:3]), np.array(same[3:])],
        "dicts": padded,
        "tuples": [(np.array(x),) for x in same],
        "iterable": iter([{"input_ids": np.array([x])} for x in same]),
    }
    trees = {}
    for name, dataset in forms.items():
        AutoRound(str(stories), dataset=dataset, **KW).quantize_and_save(tmp_path / name)
        trees[name] = tree_bytes(tmp_path / name)
    assert all(t == trees["lists"] for t in trees.values()), [k for k, t in trees.items() if t != trees["lists"]]


def test_ids_outside_the_vocabulary_name_the_item(stories: Path, ids: list[list[int]], tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    bad = [ids[0], ids[1][:5] + [512] + ids[1][6:]]  # stories260K's vocabulary has 512 tokens
    with pytest.raises(InvalidInputError, match=r"^dataset: dataset\[1\]: 'input_ids'\[5\] = 512 is not a token id"):
        AutoRound(str(stories), dataset=bad, **KW).quantize_and_save(tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_the_result_line_reaches_logging(stories: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="autoround_cpp"):
        AutoRound(str(stories), iters=0, nsamples=2, seqlen=32).quantize_and_save(tmp_path / "q")
    assert any(r.getMessage().startswith("quantized 5 blocks in ") for r in caplog.records), caplog.text
