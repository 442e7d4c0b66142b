"""Our Mamba-3 language model beside mamba3-jax (PyPI; a pure-JAX Mamba-3 without kernels), its JAX peer, at one
config: ``python -m compare.parity.mamba3_jax_peer --config mamba3-130m``.

Both models get the same weights (ours, random from ``--seed``, through the canonical mamba-ssm state dict that
mamba3-jax loads strictly) and the same tokens. Agreement: the relative L2 distance of their logits, both in
float32, at each A activation: ours with ``A_activation=heavy_tail`` against mamba3-jax as published (1.0.1 makes
A = -(1 + x) for x >= 0 and -1 / (1 - x) below, ``heavy_tail_activation``, as mamba-ssm's main), ours with softplus
(mamba-ssm 2.3.2.post1's ``Mamba3``) against mamba3-jax with its activation set to softplus; both clamp A to
-A_floor. Speed: one training step each, the same loss (next-token cross entropy) and optimizer (optax AdamW),
jitted, the median of ``--steps`` steps after two warm-up steps; ours in the config's compute dtype
(``--model.compute_dtype``; bfloat16 on a GPU by default) and A activation, mamba3-jax in float32, its only one, and
as published. Writes ``<out>.json`` and ``<out>.md``. mamba3-jax is installed with ``--no-deps`` (``make
setup-torch``).
"""

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from compare.outputs import output_path
from compare.parity.tolerances import rel_l2
from jax_mamba.checkpoints.convert import to_torch_state_dict
from jax_mamba.configs import load_config
from jax_mamba.configs.schema import MAMBA3_A_ACTIVATIONS, ModelConfig
from jax_mamba.models import MambaLMHeadModel, ParamLayout
from jax_mamba.modules.impl import compute_dtype_for

PEER = "mamba3-jax"


def peer_config(cfg: ModelConfig):
    """mamba3-jax's ``Mamba3Config`` of our model config (a Mamba-3 LM without attention layers)."""
    from mamba3_jax import Mamba3Config

    s = cfg.ssm_cfg
    if s.layer != "Mamba3" or cfg.attn_layer_idx or cfg.d_intermediate or not cfg.rms_norm:
        raise SystemExit(
            "compare.parity.mamba3_jax_peer: a Mamba-3 LM with RMSNorm and no attention or MLP layers only"
        )
    return Mamba3Config(
        vocab_size=cfg.padded_vocab_size(),
        hidden_size=cfg.d_model,
        state_size=s.resolved_d_state(),
        head_dim=s.headdim,
        expand=s.expand,
        ngroups=s.ngroups,
        chunk_size=s.chunk_size,
        num_hidden_layers=cfg.n_layer,
        layer_norm_epsilon=cfg.norm_epsilon,
        rope_fraction=s.rope_fraction,
        A_floor=s.A_floor,
        is_mimo=s.is_mimo,
        mimo_rank=s.mimo_rank,
        is_outproj_norm=s.is_outproj_norm,
        residual_in_fp32=cfg.residual_in_fp32,
        tie_word_embeddings=cfg.tie_embeddings,
    )


def build_pair(cfg: ModelConfig, seed: int) -> tuple[MambaLMHeadModel, nnx.Module]:
    """(ours, mamba3-jax's), the second loaded strictly with the first's weights."""
    from mamba3_jax import Mamba3ForCausalLM, load_pytorch_weights

    ours = MambaLMHeadModel(cfg, rngs=nnx.Rngs(seed))
    params = {k: np.asarray(v, np.float32) for k, v in ParamLayout.split(ours)[1].items()}
    state = to_torch_state_dict(params, cfg)
    theirs = Mamba3ForCausalLM(peer_config(cfg), rngs=nnx.Rngs(seed))
    load_pytorch_weights(theirs, state, strict=True)
    return ours, theirs


@contextlib.contextmanager
def softplus_A():
    """mamba3-jax with mamba-ssm's A = -softplus(dd_A) in place of its own activation, while in the block."""
    from mamba3_jax import modeling

    published = modeling.heavy_tail_activation
    modeling.heavy_tail_activation = jax.nn.softplus
    try:
        yield
    finally:
        modeling.heavy_tail_activation = published


def as_peer(activation: str):
    """mamba3-jax computing A with ``activation`` while in the block: as published for heavy_tail, through
    ``softplus_A`` for softplus."""
    return softplus_A() if activation == "softplus" else contextlib.nullcontext()


def agreement(config: str, overrides: list[str], tokens: jax.Array, seed: int) -> dict[str, float]:
    """A activation -> relative L2 of the float32 logits, mamba3-jax's against ours, with the same weights."""
    result = {}
    for activation in MAMBA3_A_ACTIVATIONS:
        fixed = ["--model.compute_dtype=float32", f"--model.ssm_cfg.A_activation={activation}"]
        ours, theirs = build_pair(load_config(config, [*overrides, *fixed]).model, seed)
        want = np.asarray(nnx.jit(our_logits)(ours, tokens), np.float32)
        with as_peer(activation):
            got = np.asarray(nnx.jit(peer_logits)(theirs, tokens), np.float32)
        result[activation] = float(rel_l2(got, want))
    return result


def our_logits(model, tokens):
    return model(tokens)


def peer_logits(model, tokens):
    return model(tokens)["logits"]


def train_step(model, logits_fn):
    """A jitted AdamW step on next-token cross entropy: step(params, opt_state, tokens) -> (params, state, loss),
    with the model's (params, opt_state) to start from."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = optax.adamw(1e-4)

    @jax.jit
    def step(params, opt_state, tokens):
        def loss(p):
            logits = logits_fn(nnx.merge(graphdef, p, rest), tokens).astype(jnp.float32)
            return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tokens[:, 1:]).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step, params, optimizer.init(params)


def median_step_ms(step, params, opt_state, tokens, steps: int) -> tuple[float, float]:
    """(median ms of ``steps`` steps after two warm-up steps, the last loss)."""
    times = []
    for i in range(steps + 2):
        start = time.perf_counter()
        params, opt_state, loss = step(params, opt_state, tokens)
        loss = float(jax.block_until_ready(loss))
        if i >= 2:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), loss


def compare(config: str, overrides: list[str], batch: int, seqlen: int, steps: int, seed: int) -> dict:
    """Agreement in float32, then each side's step time (ours in the config's compute dtype)."""
    cfg = load_config(config, overrides).model
    tokens = jnp.asarray(np.random.default_rng(seed).integers(0, cfg.vocab_size, (batch, seqlen)), jnp.int32)
    agree = agreement(config, overrides, tokens, seed)
    ours, theirs = build_pair(cfg, seed)
    rows = {}
    for name, model, fn in (("ours", ours, our_logits), (PEER, theirs, peer_logits)):
        step, params, opt_state = train_step(model, fn)
        ms, loss = median_step_ms(step, params, opt_state, tokens, steps)
        rows[name] = {"step_ms": round(ms, 3), "tokens_per_s": round(batch * seqlen / ms * 1e3, 1), "loss": loss}
    return {
        "config": config,
        "overrides": overrides,
        "batch": batch,
        "seqlen": seqlen,
        "steps": steps,
        "our_compute_dtype": jnp.dtype(compute_dtype_for(cfg)).name,
        "our_A_activation": cfg.ssm_cfg.A_activation,
        "logits_rel_l2": agree,
        "sides": rows,
        "ours_vs_peer": round(rows[PEER]["step_ms"] / rows["ours"]["step_ms"], 3),
    }


def markdown(result: dict, meta: dict) -> str:
    sides = result["sides"]
    lines = [
        f"# Mamba-3: ours beside {PEER} ({meta['device']}, {meta['date']})",
        "",
        f"`{meta['command']}`; jax {meta['jax']}, {PEER} {meta['peer_version']}. Batch {result['batch']} x "
        f"{result['seqlen']} tokens, median of {result['steps']} training steps (AdamW, next-token cross entropy) "
        f"after two warm-up steps; ours in {result['our_compute_dtype']} with A activation "
        f"{result['our_A_activation']}, {PEER} in float32 as published (heavy_tail).",
        "",
        "Agreement (same weights and tokens, both float32), logits relative L2 at each A activation: "
        + ", ".join(f"{name} {value:.2e}" for name, value in result["logits_rel_l2"].items())
        + f" (heavy_tail: {PEER} as published; softplus: its activation set to mamba-ssm 2.3.2.post1's).",
        "",
        "| side | step ms | tokens/s | last loss |",
        "|---|---|---|---|",
    ]
    for name, row in sides.items():
        lines.append(f"| {name} | {row['step_ms']:.2f} | {row['tokens_per_s']:,.0f} | {row['loss']:.4f} |")
    lines += ["", f"Ours against {PEER}: **{result['ours_vs_peer']:.2f}x** (step time ratio).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.parity.mamba3_jax_peer", description=__doc__)
    parser.add_argument("--config", default="mamba3-130m")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="output prefix (.json, .md)")
    args, overrides = parser.parse_known_args(argv)
    try:
        import mamba3_jax
    except ImportError:
        raise SystemExit(
            f"compare.parity.mamba3_jax_peer needs {PEER}: pip install --no-deps mamba3-jax==1.0.1"
        ) from None
    result = compare(args.config, overrides, args.batch_size, args.seq_len, args.steps, args.seed)
    meta = {
        "command": "python -m compare.parity.mamba3_jax_peer " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "peer_version": mamba3_jax.__version__,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    output_path(args.out, ".json").write_text(json.dumps({"meta": meta, **result}, indent=1))
    table = markdown(result, meta)
    output_path(args.out, ".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
