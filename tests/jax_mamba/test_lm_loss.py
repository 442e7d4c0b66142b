"""The language model's loss over chunks of positions (train.loss_chunk_tokens): the same sums and parameter
gradients as the whole-sequence loss, tied and untied heads, strided and whole-row chunks, with label smoothing and a
partial last chunk; the chunks' layout; the automatic rule; and the compiled step's temporary memory, which the chunks
bound."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from compare.parity.tolerances import assert_close
from jax_mamba.configs import load_config
from jax_mamba.models import ParamLayout
from jax_mamba.tasks import language_model, task_for
from jax_mamba.tasks.language_model import LOSS_CHUNK_TOKENS, lm_loss_chunk, loss_chunks, strided_chunks


def _loss_and_grads(overrides: list[str], batch: dict) -> tuple[jax.Array, dict, dict]:
    cfg = load_config("mamba2-tiny", overrides)
    task = task_for(cfg)
    layout, params, state = ParamLayout.split(task.build_model(nnx.Rngs(params=0)))

    def loss(p):
        model = layout.merge(p, state)
        total, sums = task.loss_terms(model, batch, train=True)
        return total, sums

    (total, sums), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return total, sums, grads


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("strided", [True, False])
def test_chunked_loss_equals_the_whole_loss(rng, tied, strided, monkeypatch):
    if not strided:  # whole-row chunks: what a pure FSDP mesh left to XLA takes
        monkeypatch.setattr(language_model, "batch_axes", lambda: ("fsdp",))
    batch_size, seqlen = 2, 19  # 38 positions: chunks of 7 leave a partial last chunk
    ids = rng.integers(0, 256, size=(batch_size, seqlen + 1)).astype(np.int32)
    mask = (rng.uniform(size=(batch_size, seqlen)) < 0.8).astype(np.float32)
    batch = {"inputs": jnp.asarray(ids[:, :-1]), "targets": jnp.asarray(ids[:, 1:]), "mask": jnp.asarray(mask)}
    common = [f"--tie_embeddings={str(tied).lower()}", "--label_smoothing=0.1", "--mesh.fsdp_gather=xla"]
    whole = _loss_and_grads([*common, "--loss_chunk_tokens=0"], batch)
    chunked = _loss_and_grads([*common, "--loss_chunk_tokens=7"], batch)
    assert_close("loss sum", chunked[0], whole[0], jnp.float32)
    assert float(chunked[1]["count"]) == float(whole[1]["count"]) == mask.sum()
    assert float(chunked[1]["correct"]) == float(whole[1]["correct"])
    assert set(chunked[2]) == set(whole[2])
    for name in whole[2]:
        assert_close(f"d{name}", chunked[2][name], whole[2][name], jnp.float32)


def test_strided_chunks_prefer_a_divisor_of_the_length_and_bound_the_chunk():
    assert strided_chunks(4, 2048, 4096) == (2, 1024)  # one device's batch of mamba1-790m: two chunks of 4096
    assert strided_chunks(8, 2048, 4096) == (4, 512)  # the global batch of two: each device's share halves
    assert strided_chunks(2, 19, 7) == (7, 3)  # 19 is prime: 3 positions of each row, the last chunk padded
    assert strided_chunks(2, 20, 7) == (10, 2)  # 7 chunks of 3 would pad; 10 of 2 divide 20
    assert strided_chunks(64, 16, 4) == (16, 1)  # more rows than a chunk holds: one position of every row


@pytest.mark.parametrize("strided", [True, False])
def test_loss_chunks_hold_every_position_once_and_pad_with_zeros(rng, strided):
    for _ in range(5):
        rows, length = int(rng.integers(1, 6)), int(rng.integers(1, 40))
        chunk = int(rng.integers(1, rows * length + 1))
        ids = jnp.arange(1, rows * length + 1).reshape(rows, length)  # position ids; 0 marks padding
        chunks = np.asarray(loss_chunks(ids[..., None], chunk, strided))[..., 0]
        assert chunks[0].size <= max(chunk, rows), (rows, length, chunk, chunks.shape)
        got = chunks.reshape(-1)
        np.testing.assert_array_equal(np.sort(got[got > 0]), np.arange(1, rows * length + 1))
        if strided:  # each chunk holds a share of every row: rows split over devices stay split
            assert chunks.shape[1] == rows
            for r in range(rows):
                held = chunks[:, r][chunks[:, r] > 0]
                assert np.all((held - 1) // length == r)


def test_automatic_chunks_only_where_the_logits_are_large():
    assert lm_loss_chunk(0, 8 * 2048, 50280) == 8 * 2048  # 3.3 GB of float32 logits: one chunk
    assert lm_loss_chunk(0, 65536, 50280) == LOSS_CHUNK_TOKENS  # 13.2 GB
    assert lm_loss_chunk(100, 65536, 50280) == 100
    assert lm_loss_chunk(100, 30, 50280) == 30


def test_chunks_are_per_device_on_a_mesh():
    """Over ``devices`` sharing the positions, each device's share follows the same rule as one device alone."""
    assert lm_loss_chunk(0, 4 * 8 * 2048, 50280, devices=4) == 4 * 8 * 2048  # each device's 3.3 GB: one chunk
    assert lm_loss_chunk(0, 4 * 65536, 50280, devices=4) == 4 * LOSS_CHUNK_TOKENS
    assert lm_loss_chunk(4096, 4 * 8 * 2048, 50280, devices=4) == 4 * 4096
    assert lm_loss_chunk(4096, 3 * 1000, 50280, devices=3) == 3000  # never more than the positions


def test_chunks_bound_the_compiled_steps_temporary_memory():
    """The train step's temporaries (XLA's CPU compilation: what it allocates beside parameters and inputs) at a
    50280-token vocabulary and 4096 positions: the whole loss holds several (positions, vocab) float32 arrays
    (0.8 GB each), chunks of 512 positions only chunk-sized ones."""
    from jax_mamba.train.step import init_training

    def temp_bytes(chunk: int) -> int:
        overrides = ["--vocab_size=50280", "--batch_size=1", "--seq_len=4096", f"--loss_chunk_tokens={chunk}"]
        cfg = load_config("mamba2-tiny", overrides)
        setup = init_training(cfg, task_for(cfg))
        ids = jnp.zeros((1, 1, 4096), jnp.int32)
        batch = {"inputs": ids, "targets": ids, "mask": jnp.ones((1, 1, 4096), jnp.float32)}
        args = (setup.params, setup.opt_state, setup.state, batch, np.int32(0))
        return setup.train_step.lower(*args).compile().memory_analysis().temp_size_in_bytes

    logits_bytes = 4096 * 50280 * 4
    whole, chunked = temp_bytes(0), temp_bytes(512)
    assert whole > 2 * logits_bytes, whole
    assert chunked < logits_bytes / 2, chunked
