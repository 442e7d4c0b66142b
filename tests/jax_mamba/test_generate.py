"""Generation: decoding position by position (prefill, then the layers' recurrent steps and KV caches) gives the
full forward's logits for Mamba-1, Mamba-2 (its variants), Mamba-3 and hybrid models; the compiled loop's greedy
tokens equal greedy decoding by full forwards, with prompts of different lengths; sampling filters; eos; argument
checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from compare.parity.tolerances import assert_close
from jax_mamba.configs.loader import load_config
from jax_mamba.generate import SamplingConfig, generate, sample_tokens
from jax_mamba.generate import decode as decode_module
from jax_mamba.models import MambaLMHeadModel
from tests.jax_mamba.test_modules import perturb

MODELS = {  # name: (config, overrides): every mixer path a step takes
    "mamba1": ("mamba1-tiny", []),
    "mamba1-pallas": ("mamba1-tiny", ["--model.impl=pallas", "--model.n_layer=1"]),
    "mamba2": ("mamba2-tiny", ["--model.ssm_cfg.ngroups=2", "--model.ssm_cfg.dt_limit=[0.01,0.5]"]),
    "mamba2-pallas": ("mamba2-tiny", ["--model.impl=pallas", "--model.n_layer=1"]),
    "mamba2-mlp-no-norm": (
        "mamba2-tiny",
        ["--model.ssm_cfg.d_ssm=64", "--model.ssm_cfg.rmsnorm=false", "--model.ssm_cfg.D_has_hdim=true"],
    ),
    "hybrid": ("hybrid-tiny", ["--model.attn_cfg.d_conv=4", "--model.attn_cfg.mlp_dim=64"]),
    "hybrid-interleaved-rotary": ("hybrid-tiny", ["--model.attn_cfg.rotary_emb_interleaved=true"]),
    "mamba3": ("mamba3-tiny", ["--model.ssm_cfg.ngroups=2", "--model.ssm_cfg.chunk_size=4"]),
    "mamba3-outproj-norm": ("mamba3-tiny", ["--model.ssm_cfg.is_outproj_norm=true", "--model.n_layer=1"]),
    "mamba3-mimo": ("mamba3-tiny", ["--model.ssm_cfg.is_mimo=true", "--model.ssm_cfg.mimo_rank=2", "--chunk_size=8"]),
    "mamba3-mimo-outproj-norm": (
        "mamba3-tiny",
        ["--model.ssm_cfg.is_mimo=true", "--model.ssm_cfg.is_outproj_norm=true", "--model.n_layer=1"],
    ),
    "mamba3-hybrid": ("mamba3-tiny", ["--model.attn_layer_idx=[1]", "--model.attn_cfg.num_heads=4"]),
}


def build(name: str, rng, dtype: str = "float32") -> MambaLMHeadModel:
    config, overrides = MODELS[name]
    cfg = load_config(config, [f"--model.compute_dtype={dtype}", *overrides]).model
    return perturb(MambaLMHeadModel(cfg, rngs=nnx.Rngs(int(rng.integers(1 << 30)))), rng, scale=0.05)


def prefill(model: MambaLMHeadModel, ids: jax.Array, max_len: int):
    """``model.prefill`` compiled as one program."""
    return nnx.jit(lambda m, ids: m.prefill(ids, max_len=max_len))(model, ids)


@pytest.mark.parametrize("name", list(MODELS))
def test_step_logits_equal_the_full_forward(name, rng):
    """float32: prefill the first k positions, step through the rest; every position's logits are the full
    forward's within float32's tolerance (relative L2 1e-4)."""
    model = build(name, rng)
    seqlen, k = 19, int(rng.integers(1, 8))
    ids = jnp.asarray(rng.integers(0, model.cfg.vocab_size, (2, seqlen)), jnp.int32)
    full = nnx.jit(lambda m, ids: m(ids))(model, ids)  # compiled whole: eager runs op by op, several times slower
    logits, caches = prefill(model, ids[:, :k], seqlen)
    stepped = [logits]
    step = nnx.jit(lambda m, t, c, p: m.step(t, c, p))
    for pos in range(k, seqlen):
        logits, caches = step(model, ids[:, pos], caches, jnp.int32(pos))
        stepped.append(logits)
    assert_close(f"{name} logits", jnp.stack(stepped, 1), full[:, k - 1 :], jnp.float32)


@pytest.mark.parametrize("name", ["mamba1-pallas", "mamba2", "mamba2-pallas", "hybrid", "mamba3", "mamba3-mimo"])
def test_bfloat16_state_steps_follow_the_float32_ones(name, rng):
    """The decoding loop's ``state_dtype="bfloat16"``: the SSM caches stay bfloat16 through the steps, and the
    logits stay within bfloat16's tolerance of the float32 state's."""
    model = build(name, rng)
    seqlen, k = 12, int(rng.integers(1, 5))
    ids = jnp.asarray(rng.integers(0, model.cfg.vocab_size, (2, seqlen)), jnp.int32)
    step = nnx.jit(lambda m, t, c, p: m.step(t, c, p))
    logits, caches = prefill(model, ids[:, :k], seqlen)
    half = decode_module.ssm_states_as(caches, jnp.bfloat16)
    for pos in range(k, seqlen):
        logits, caches = step(model, ids[:, pos], caches, jnp.int32(pos))
        half_logits, half = step(model, ids[:, pos], half, jnp.int32(pos))
        assert_close(f"{name} logits at {pos}", half_logits, logits, jnp.bfloat16)
    assert all(c["ssm"].dtype == jnp.bfloat16 for c in half if "ssm" in c)
    greedy = SamplingConfig(temperature=0.0)
    assert generate(model, [[1, 2]], 3, sampling=greedy, state_dtype="bfloat16").tokens.shape == (1, 3)


def greedy_by_full_forward(model, prompt: list[int], count: int, width: int = 16) -> list[int]:
    """Greedy continuation by whole forwards over the sequence so far, zero-padded to ``width`` (causal: padding
    after a position never changes its logits), so that one compiled forward serves every step."""
    forward = nnx.jit(lambda m, ids: m(ids))
    seq = list(prompt)
    for _ in range(count):
        padded = jnp.asarray([seq + [0] * (width - len(seq))], jnp.int32)
        seq.append(int(jnp.argmax(forward(model, padded)[0, len(seq) - 1, : model.cfg.vocab_size])))
    return seq[len(prompt) :]


@pytest.mark.parametrize("name", ["mamba1", "mamba2", "hybrid"])
def test_greedy_generation_with_prompts_of_different_lengths(name, rng):
    model = build(name, rng)
    prompts = [list(rng.integers(0, 256, n)) for n in (5, 1, 9)]
    result = generate(model, prompts, 6, sampling=SamplingConfig(temperature=0.0))
    assert result.tokens.shape == (3, 6) and list(result.lengths) == [6, 6, 6]
    for row, prompt in zip(result.tokens, prompts, strict=True):
        assert list(row) == greedy_by_full_forward(model, prompt, 6)


def test_eos_stops_each_row_and_the_loop_compiles_once(rng):
    model = build("mamba2", rng)
    prompts = [list(rng.integers(0, 256, 4)) for _ in range(2)]
    greedy = SamplingConfig(temperature=0.0)
    plain = generate(model, prompts, 8, sampling=greedy)
    eos = int(plain.tokens[0, 2])  # row 0 emits it as its third token
    stopped = generate(model, prompts, 8, sampling=greedy, eos_id=eos)
    first = [list(row).index(eos) + 1 if eos in row else 8 for row in plain.tokens]
    assert list(stopped.lengths) == first
    for row, plain_row, n in zip(stopped.tokens, plain.tokens, first, strict=True):
        assert list(row[:n]) == list(plain_row[:n]) and all(t == eos for t in row[n:])
    compiled = decode_module._COMPILED[model]
    size = compiled._cache_size()
    generate(model, prompts, 8, sampling=greedy, eos_id=eos, seed=5)  # same shapes: no new trace
    assert compiled._cache_size() == size


def test_sampling_filters(rng):
    vocab, padded = 10, 16
    logits = jnp.asarray(rng.normal(size=(4, padded)), jnp.float32).at[:, vocab:].set(100.0)  # padding never wins
    keys = jax.random.split(jax.random.key(int(rng.integers(1 << 30))), 400)
    draw = lambda s: np.stack([np.asarray(sample_tokens(logits, k, s, vocab)) for k in keys])  # noqa: E731
    real = np.asarray(logits[:, :vocab])
    order = np.argsort(-real, axis=1)
    assert (draw(SamplingConfig(temperature=0.0)) == order[:, 0]).all()
    assert (draw(SamplingConfig(top_k=1)) == order[:, 0]).all()
    top3 = draw(SamplingConfig(temperature=2.0, top_k=3))
    assert all(set(top3[:, r]) <= set(order[r, :3]) for r in range(4))
    assert all(len(set(top3[:, r])) == 3 for r in range(4))  # each of the three turns up in 400 draws at T=2
    anything = draw(SamplingConfig(temperature=1.0))
    assert anything.max() < vocab
    probs = np.exp(real - real.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    sorted_probs = np.take_along_axis(probs, order, axis=1)
    nucleus = draw(SamplingConfig(top_p=0.6))
    for r in range(4):  # the smallest set of top tokens whose mass reaches 0.6
        size = int(np.searchsorted(np.cumsum(sorted_probs[r]), 0.6) + 1)
        assert set(nucleus[:, r]) <= set(order[r, :size])


def test_argument_checks(rng):
    model = build("mamba1", rng)
    with pytest.raises(ValueError, match="each of at least one token"):
        generate(model, [[1, 2], []], 4)
    with pytest.raises(ValueError, match=r"prompt token ids must be in \[0, vocab_size=256\)"):
        generate(model, [[1, 256]], 4)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
        generate(model, [[1]], 0)
    with pytest.raises(ValueError, match="top_p must be in"):
        generate(model, [[1]], 2, sampling=SamplingConfig(top_p=0.0))
    with pytest.raises(ValueError, match="temperature must be a number >= 0"):
        generate(model, [[1]], 2, sampling=SamplingConfig(temperature=-1.0))
    with pytest.raises(ValueError, match="eos_id must be in"):
        generate(model, [[1]], 2, eos_id=300)
    with pytest.raises(ValueError, match=r"state_dtype must be one of \('float32', 'bfloat16'\), got 'float16'"):
        generate(model, [[1]], 2, state_dtype="float16")
    hybrid = build("hybrid", rng)
    with pytest.raises(ValueError, match="max_len=2 must be >= the prompt's length 3"):
        hybrid.prefill(jnp.zeros((1, 3), jnp.int32), max_len=2)
