"""Tokenized corpora: tokenizers (bytes, tokenizer.json), the preprocessing command's token folders, memory-mapped
token files, training on them and on text tokenized on load, and generating from such a run."""

import json

import numpy as np
import pytest

from jax_mamba.configs.loader import load_config
from jax_mamba.data import DataError, make_dataset
from jax_mamba.data.token_files import load_token_files
from jax_mamba.data.tokenize import main as tokenize_main
from jax_mamba.data.tokenize import tokenize_to_folder
from jax_mamba.data.tokenizer import ByteTokenizer, HFTokenizer
from jax_mamba.generate.__main__ import main as generate_main
from jax_mamba.train.__main__ import main as train_main
from tests.jax_mamba.tokenizer_fixture import TEXT, write_tokenizer
from tests.jax_mamba.training_runs import QUIET, records


@pytest.fixture
def tokenizer_file(tmp_path):
    return write_tokenizer(tmp_path)


def write_corpus(folder, rng, files: int = 12):
    """Text files of shuffled words from TEXT; returns their contents by relative path."""
    words = TEXT.split(" ")
    contents = {}
    for i in range(files):
        text = " ".join(rng.choice(words, size=int(rng.integers(40, 80))))
        path = folder / f"doc{i:02d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        contents[path.name] = text
    return contents


def test_tokenizers(tokenizer_file, tmp_path):
    tok = HFTokenizer(tokenizer_file)
    assert tok.vocab_size == 300 and tok.eos_id == 0
    text = "the lazy fox reads ü, ∑ and a sequence"
    assert tok.decode(tok.encode(text)) == text
    assert HFTokenizer(tokenizer_file.parent).vocab_size == 300  # a folder holding tokenizer.json
    with pytest.raises(DataError, match="not found"):
        HFTokenizer(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DataError, match=r"not a readable tokenizer\.json"):
        HFTokenizer(tmp_path / "bad.json")
    raw = ByteTokenizer()
    assert raw.encode("aü") == [97, 195, 188] and raw.decode([97, 195, 188]) == "aü"
    assert raw.decode([97, 195]) == "a\ufffd"  # a cut multi-byte character decodes, replaced


def test_tokenize_command_writes_a_token_folder(tokenizer_file, tmp_path, rng, capsys):
    contents = write_corpus(tmp_path / "corpus", rng)
    out = tmp_path / "tokens"
    assert (
        tokenize_main(["--tokenizer", str(tokenizer_file), "--input", str(tmp_path / "corpus"), "--out", str(out)]) == 0
    )
    assert "training and" in capsys.readouterr().out
    meta = json.loads((out / "meta.json").read_text())
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == 300 and meta["eos_id"] == 0
    corpus = load_token_files(str(out), 0.05, "uint16")
    assert isinstance(corpus.train, np.memmap) and corpus.train.dtype == np.uint16
    tok = HFTokenizer(tokenizer_file)
    every = sorted(np.concatenate([corpus.train, corpus.val]).tolist())
    expected = sorted(i for text in contents.values() for i in [*tok.encode(text), 0])
    assert every == expected  # each file's ids plus one separator, split between train and val
    assert len(corpus.val) > 0 and len(corpus.train) > len(corpus.val)
    with pytest.raises(DataError, match="already holds token files"):
        tokenize_to_folder(str(tokenizer_file), str(tmp_path / "corpus"), str(out), 0.05, progress=False)
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.txt").write_text("the fox")
    with pytest.raises(DataError, match="both must be non-empty"):
        tokenize_to_folder(str(tokenizer_file), str(tmp_path / "one"), str(tmp_path / "t1"), 0.05, progress=False)
    assert not list((tmp_path / "t1").iterdir())  # nothing half-written is left


def test_bare_token_file_and_refusals(tmp_path, rng):
    ids = rng.integers(0, 70_000, 1000).astype(np.uint32)
    ids.tofile(tmp_path / "ids.bin")
    corpus = load_token_files(str(tmp_path / "ids.bin"), 0.1, "uint32")
    assert len(corpus.train) == 900 and corpus.vocab_size == int(ids.max()) + 1
    np.testing.assert_array_equal(np.concatenate([corpus.train, corpus.val]), ids)
    (tmp_path / "odd.bin").write_bytes(b"\x00" * 7)
    with pytest.raises(DataError, match="not a whole, non-empty number of uint16"):
        load_token_files(str(tmp_path / "odd.bin"), 0.1, "uint16")
    with pytest.raises(DataError, match="lacks"):
        load_token_files(str(tmp_path), 0.1, "uint16")
    cfg = load_config(
        "mamba1-tiny",
        ["--data.kind=tokens", f"--data.path={tmp_path / 'ids.bin'}", "--token_dtype=uint32", "--val_fraction=0.1"],
    )
    dataset = make_dataset(cfg.data, cfg.train)
    batch = dataset.train_batch(0, 1)
    assert batch["inputs"].shape == (1, 8, 64) and batch["inputs"].max() < 70_000
    np.testing.assert_array_equal(batch["inputs"][..., 1:], batch["targets"][..., :-1])
    with pytest.raises(ValueError, match=r"data\.token_dtype"):
        load_config("mamba1-tiny", ["--token_dtype=int8"])


def test_train_on_tokens_then_generate(tokenizer_file, tmp_path, rng, capsys):
    write_corpus(tmp_path / "corpus", rng, files=30)
    folder = tmp_path / "tokens"
    tokenize_to_folder(str(tokenizer_file), str(tmp_path / "corpus"), str(folder), 0.1, progress=False)
    run = tmp_path / "run"
    small = ["--max_steps=2", "--eval_every=2", "--save_every=2", "--seq_len=32", "--batch_size=4", *QUIET]
    assert train_main(["--config", "mamba1-tiny", "--data", str(folder), f"--run_dir={run}", *small]) == 2
    assert "model.vocab_size=256 is smaller than the data's vocabulary (300 tokens)" in capsys.readouterr().err
    args = ["--config", "mamba1-tiny", "--data", str(folder), f"--run_dir={run}", "--vocab_size=300"]
    assert train_main([*args, f"--tokenizer={tokenizer_file}", "--sample_tokens=4", *small]) == 0
    out = capsys.readouterr().out
    assert "sample (" in out and "\nThe " in out
    evals = [r for r in records(run) if "eval_loss" in r]
    assert "eval_perplexity" in evals[-1] and "eval_bits_per_byte" not in evals[-1]
    prompts = ["--prompt", "the quick", "--prompt", "a"]
    assert generate_main(["--run_dir", str(run), *prompts, "--max_new_tokens", "5", "--temperature", "0"]) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("the quick") and "\n" + "-" * 40 + "\na" in printed.out
    assert str(tokenizer_file) in printed.err
    assert generate_main(["--run_dir", str(tmp_path / "nothing"), "--prompt", "a"]) == 2
    assert "not a training run folder" in capsys.readouterr().err


def test_text_tokenized_on_load(tokenizer_file, tmp_path, rng):
    write_corpus(tmp_path / "corpus", rng)
    cfg = load_config(
        "mamba1-tiny", [f"--data.path={tmp_path / 'corpus'}", "--data.kind=text", f"--tokenizer={tokenizer_file}"]
    )
    dataset = make_dataset(cfg.data, cfg.train)
    assert dataset.vocab_size == 300 and dataset.metric == "perplexity"
    assert dataset.describe()["tokenizer"] == str(tokenizer_file)
    with pytest.raises(ValueError, match=r"data\.tokenizer"):
        load_config("induction-heads-mamba1", [f"--tokenizer={tokenizer_file}"])
