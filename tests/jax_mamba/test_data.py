"""Data: the embedded stdlib corpus, user text files/folders, synthetic tasks, determinism and clear errors."""

import re

import numpy as np
import pytest

from jax_mamba.configs.schema import DataConfig, TrainConfig
from jax_mamba.data import DataError, make_dataset
from jax_mamba.data.corpus import stdlib_corpus, text_corpus

TRAIN = TrainConfig(batch_size=4, seq_len=32, seed=3, eval_batches=2)


def test_stdlib_corpus_is_deterministic_and_split_by_file():
    a, b = stdlib_corpus(0.05), stdlib_corpus(0.05)
    assert a.files > 100 and len(a.train) > 1_000_000 and len(a.val) > 10_000
    assert np.array_equal(a.train, b.train) and np.array_equal(a.val, b.val)
    assert 0.01 < len(a.val) / (len(a.train) + len(a.val)) < 0.15
    assert b"def " in a.train[:200_000].tobytes()


def test_batches_are_a_function_of_seed_and_step():
    ds = make_dataset(DataConfig(kind="stdlib"), TRAIN)
    b1, b2 = ds.train_batch(7, 2), ds.train_batch(7, 2)
    assert b1["inputs"].shape == (2, 4, 32) and b1["inputs"].dtype == np.int32
    assert all(np.array_equal(b1[k], b2[k]) for k in b1)
    assert not np.array_equal(ds.train_batch(8, 1)["inputs"], b1["inputs"][:1])
    assert np.array_equal(b1["inputs"][..., 1:], b1["targets"][..., :-1])  # targets are inputs shifted by one
    evals = ds.eval_batches()
    assert len(evals) == 2 and np.array_equal(
        evals[0]["inputs"], make_dataset(DataConfig(), TRAIN).eval_batches()[0]["inputs"]
    )


def test_text_file_and_folder(tmp_path):
    text = "".join(f"line {i}: the quick brown fox\n" for i in range(200))
    single = tmp_path / "one.txt"
    single.write_text(text)
    corpus = text_corpus(str(single), 0.1)
    assert corpus.train.tobytes() + corpus.val.tobytes() == text.encode()
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    for i in range(30):
        (folder / "sub" / f"doc{i}.txt").write_text(text[i:] + "\n")
    (folder / ".hidden").write_text("secret")
    (folder / "blob.bin").write_bytes(b"\x00\x01binary")
    corpus = text_corpus(str(folder), 0.2)
    assert corpus.files == 30
    joined = corpus.train.tobytes() + corpus.val.tobytes()
    assert b"secret" not in joined and b"binary" not in joined
    ds = make_dataset(DataConfig(kind="text", path=str(folder)), TRAIN)
    assert ds.train_batch(0, 1)["inputs"].max() < 256


def _bad_path(tmp_path, case: str) -> str:
    path = tmp_path / case
    if case == "empty.txt":
        path.write_text("")
    elif case == "empty_folder":
        path.mkdir()
    elif case == "short.txt":
        path.write_text("abc")
    return str(path)


@pytest.mark.parametrize(
    "case,message",
    [
        ("missing.txt", "does not exist"),
        ("empty.txt", "is empty"),
        ("empty_folder", "is an empty folder"),
        ("short.txt", "train.seq_len=32 needs at least 33"),
    ],
)
def test_bad_data_paths_are_clear_errors(tmp_path, case, message):
    with pytest.raises(DataError, match=message):
        make_dataset(DataConfig(kind="text", path=_bad_path(tmp_path, case)), TRAIN)


def test_selective_copying_layout():
    cfg = DataConfig(kind="selective_copying", num_symbols=8, num_tokens_to_copy=5)
    ds = make_dataset(cfg, TrainConfig(batch_size=16, seq_len=40, seed=1))
    b = ds.train_batch(0, 1)
    inputs, targets, mask = b["inputs"][0], b["targets"][0], b["mask"][0]
    assert ds.vocab_size == 10
    np.testing.assert_array_equal(inputs[:, 35:], 9)  # copy markers
    np.testing.assert_array_equal(mask[:, 35:], 1.0)
    assert mask[:, :35].sum() == 0
    for row in range(16):
        data = inputs[row, :35][inputs[row, :35] > 0]
        np.testing.assert_array_equal(data, targets[row, 35:])  # the data tokens, in order


def test_induction_heads_layout():
    ds = make_dataset(DataConfig(kind="induction_heads", num_symbols=6), TrainConfig(batch_size=32, seq_len=20))
    b = ds.train_batch(5, 1)
    inputs, targets, mask = b["inputs"][0], b["targets"][0], b["mask"][0]
    assert ds.vocab_size == 7
    for row in range(32):
        triggers = np.flatnonzero(inputs[row] == 6)
        assert len(triggers) == 2 and triggers[1] == 19
        assert targets[row, 19] == inputs[row, triggers[0] + 1]
    assert mask.sum() == 32 and np.all(mask[:, -1] == 1)


def test_synthetic_tasks_reject_too_short_sequences():
    with pytest.raises(DataError, match=re.escape("seq_len >= 2 * data.num_tokens_to_copy")):
        make_dataset(DataConfig(kind="selective_copying", num_tokens_to_copy=16), TrainConfig(seq_len=20))
