"""A small byte-level BPE tokenizer.json trained in the test (no download), with an end-of-text token."""

from pathlib import Path

TEXT = (
    "the quick brown fox jumps over the lazy dog. a state space model reads the sequence once; "
    "def main():\n    return sum(range(10))\n"
)


def write_tokenizer(folder: Path, vocab_size: int = 300) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TEXT] * 20, trainer)
    path = folder / "tokenizer.json"
    tok.save(str(path))
    return path
