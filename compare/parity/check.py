"""JAX vs PyTorch parity: ``python -m compare.parity --config NAME [--dtype bfloat16] [--ops-only]``.

Model level, for any family (``compare.parity.families``): the reference is built from the config (random init, seeded:
mamba-ssm's ``MambaLMHeadModel``, NVlabs' ``MambaVision``, Graph-Mamba on torch_geometric and mamba-ssm's ``Mamba``),
its weights converted into our model; the same batch gives logits, loss and every parameter gradient on both sides
(MambaVision and Graph-Mamba in eval and in training mode, where the running statistics after the forward are
compared too), then one AdamW step with the same settings (weight-decay
groups, lr, betas, eps) on the same gradients gives the new parameters.
Op level: our ``pallas_kernels`` ops (every available ``impl``) against mamba-ssm's at the config's layer shapes,
outputs and every input gradient. mamba-ssm runs at its best on a GPU (CUDA/Triton) or as its CPU fallback; the
report names which. Prints a table, writes JSON with every row.
Other ``--key=value`` arguments override the config (e.g. ``--model.attn_cfg.rotary_emb_dim=0``).
"""

import argparse
import dataclasses
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX and torch share the GPU here

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from compare.parity.families import SIDES, without_randomness
from compare.parity.tolerances import Comparison, compare, compare_to_reference_noise, gradient_floor
from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.configs.schema import GraphMambaConfig, MambaVisionConfig, ModelConfig, OptimConfig, RunConfig
from jax_mamba.models import ParamLayout
from jax_mamba.models.mamba_vision import MIXER
from jax_mamba.tasks import task_for
from jax_mamba.train.optim import make_optimizer
from pallas_kernels import available_impls, causal_conv1d_fn, mamba_chunk_scan_combined, rmsnorm_fn, selective_scan_fn


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values exactly representable in ``dtype``, so both frameworks start from identical inputs."""
    return np.asarray(jnp.asarray(x, dtype).astype(jnp.float32))


# ----------------------------------------------------------------------------------------------- model level


def model_parity(
    ref,
    cfg: RunConfig,
    *,
    compute_dtype: str = "float32",
    batch: int = 2,
    seq_len: int = 64,
    seed: int = 0,
    lr: float = 1e-3,
    gradients: bool = True,
) -> list[Comparison]:
    """Logits, loss, every parameter gradient (and, for families with batch statistics, the running statistics a
    training forward leaves) in each of the family's modes, then one AdamW step (``gradients=False``: logits and
    loss only). ``seq_len`` is the sequence length of language models, the image side of vision models and the
    largest graph's node count of graph models (``batch`` graphs).

    In bf16 (torch autocast vs our compute_dtype) the reference also runs in float32, and the bounds are relative to
    its own bf16 error (see ``compare.parity.tolerances``). A gradient is compared relative to at least its floor:
    GRAD_FLOOR x the whole gradient's norm and, for the bias of a Linear or convolution, the spread of the terms it
    sums (``TorchModel.bias_gradient_spreads``), both from the reference's float32 run."""
    cfg = without_randomness(cfg)
    side = SIDES[cfg.family](ref, cfg, seed)
    task = task_for(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, compute_dtype=compute_dtype)))
    params, state = side.our_variables()
    params = {k: jnp.asarray(v) for k, v in params.items()}
    state = {k: jnp.asarray(v) for k, v in state.items()}
    layout = ParamLayout.split(nnx.eval_shape(lambda: task.build_model(nnx.Rngs(0))))[0]
    data = side.make_batch(np.random.default_rng(seed), batch, seq_len)
    batch_for = getattr(side, "batch_for", lambda mode, data: data)
    real_rows = getattr(side, "real_rows", lambda data, outputs: outputs)
    dtype = jnp.dtype(compute_dtype)
    label = (lambda mode, name: f"{mode} {name}") if len(side.modes) > 1 else (lambda mode, name: name)
    rows: list[Comparison] = []
    for mode in side.modes:
        smoothing = cfg.train.label_smoothing if mode == "train" else 0.0
        mode_data = batch_for(mode, data)
        with side.torch.bias_gradient_spreads() as spreads:  # the float32 run sets every gradient's floor
            run32 = side.torch_run(mode_data, "float32", mode, smoothing)
        if compute_dtype == "float32":
            fp32, t_run = (None, None, {}, {}), run32
        else:  # the reference's own bf16 error, measured against its float32 run
            fp32, t_run = run32, side.torch_run(mode_data, compute_dtype, mode, smoothing)
        t_logits, t_loss, t_grads, t_state = t_run

        def check(name, ours, theirs, theirs_fp32, floor=0.0):
            if compute_dtype == "float32":
                return compare(name, ours, theirs, dtype, floor=floor)
            return compare_to_reference_noise(name, ours, theirs, theirs_fp32, dtype, floor=floor)

        ours_data = {k: jnp.asarray(v) for k, v in mode_data.items()}  # our side gets device arrays, as in training

        def run(p, mode=mode, data=ours_data):
            model = layout.merge(p, state)
            model.train() if mode == "train" else model.eval()
            loss_sum, sums = task.loss_terms(model, data, train=mode == "train", rngs=None)
            return loss_sum / sums["count"], layout.state_of(model)

        def logits_of(p, mode=mode, data=ours_data):
            model = layout.merge(p, state)
            model.train() if mode == "train" else model.eval()
            return task.forward(model, data).astype(jnp.float32)

        logits = real_rows(mode_data, np.asarray(jax.jit(logits_of)(params)))
        rows.append(check(label(mode, "logits"), logits, t_logits, fp32[0]))
        if not gradients:
            loss, _ = jax.jit(run)(params)
            rows.append(check(label(mode, "loss"), np.float64(loss), np.float64(t_loss), fp32[1]))
            continue
        (loss, new_state), grads = jax.jit(jax.value_and_grad(run, has_aux=True))(params)
        rows.append(check(label(mode, "loss"), np.float64(loss), np.float64(t_loss), fp32[1]))
        ours = side.to_torch(
            {k: np.asarray(v) for k, v in grads.items()}, {k: np.asarray(v) for k, v in new_state.items()}
        )
        floor = gradient_floor(run32[2])
        rows += [
            check(label(mode, f"grad {n}"), ours[n], g, fp32[2].get(n), max(floor, spreads.get(n, 0.0)))
            for n, g in t_grads.items()
        ]
        if mode == "train":
            rows += [check(label(mode, f"state {n}"), ours[n], v, fp32[3].get(n)) for n, v in t_state.items()]

    if not gradients:
        return rows
    # The optimizer step runs on the same gradients (torch's, of the last training run) on both sides: AdamW's
    # first step is about lr * sign(g), so gradients that are zero up to rounding (e.g. an attention key bias)
    # would otherwise turn rounding noise into lr-sized differences; the gradient rows above compare gradients.
    optim = OptimConfig(lr=lr, min_lr=lr, warmup_steps=0, weight_decay=0.1, grad_clip=0.0)
    decay = task.weight_decay_mask(params)
    tx = make_optimizer(optim, 100, decay)
    same_grads = {k: jnp.asarray(v) for k, v in side.from_torch(t_grads).items()}

    @jax.jit
    def first_step(grads, params):  # one program, not one per parameter and primitive run eagerly
        updates, _ = tx.update(grads, tx.init(params), params)
        return {k: params[k] + updates[k] for k in params}

    stepped = side.to_torch({k: np.asarray(v) for k, v in first_step(same_grads, params).items()}, state)
    t_stepped = side.torch.adamw_step(
        lr=lr,
        betas=(optim.beta1, optim.beta2),
        eps=optim.eps,
        weight_decay=optim.weight_decay,
        decayed={side.convert.torch_name(k) for k in params if decay[k]},
    )
    rows += [compare(f"adamw {name}", stepped[name], t_stepped[name], jnp.float32) for name in t_grads]
    return rows


# ----------------------------------------------------------------------------------------------- op level


def _check_op(name: str, jax_fn, torch_fn, arrays: dict, dtype: str, rng: np.random.Generator) -> list[Comparison]:
    """Run ``jax_fn(**arrays, impl=...)`` and ``torch_fn(arrays, dtypes, cotangent)`` on the same inputs and output
    cotangent; compare the output and every input gradient. In bf16/fp16 mamba-ssm also runs in float32, and each
    bound is the larger of the dtype's tolerance and twice mamba-ssm's own error (as for whole models)."""
    names = [k for k, v in arrays.items() if v is not None]
    dtypes = {k: dtype if k in _ACTIVATIONS else "float32" for k in names}  # params stay float32, as in the models
    rows = []
    for impl in available_impls(jax_fn):
        inputs = [jnp.asarray(arrays[k], dtypes[k]) for k in names]

        def run(*xs, impl=impl):
            return jax_fn(**dict(zip(names, xs, strict=True)), impl=impl)

        out_shape = jax.eval_shape(run, *inputs)
        cotangent = rounded(rng.normal(size=out_shape.shape), dtype)

        @jax.jit
        def forward_and_grads(xs, ct, run=run):  # one program, not one per primitive run eagerly
            out, vjp = jax.vjp(run, *xs)
            return out, vjp(ct)

        out, input_grads = forward_and_grads(inputs, jnp.asarray(cotangent, out_shape.dtype))
        grads = dict(zip(names, input_grads, strict=True))
        (t_out,), t_grads = torch_fn(arrays, dtypes, cotangent)
        ours = {"out": out} | {f"d{k}": grads[k] for k in names}
        theirs = {"out": t_out} | {f"d{k}": t_grads[k] for k in names}
        theirs32 = None
        if dtype != "float32":  # as for whole models: the bound is max(dtype tolerance, 2x mamba-ssm's own error)
            (t_out32,), t_grads32 = torch_fn(arrays, dict.fromkeys(dtypes, "float32"), cotangent)
            theirs32 = {"out": t_out32} | {f"d{k}": t_grads32[k] for k in names}
        for key, value in ours.items():
            label, actual = f"{name} [{impl}] {key}", np.asarray(value.astype(jnp.float32))
            if theirs32 is None:
                rows.append(compare(label, actual, theirs[key], jnp.float32))
            else:
                rows.append(compare_to_reference_noise(label, actual, theirs[key], theirs32[key], jnp.dtype(dtype)))
    return rows


_ACTIVATIONS = {"u", "delta", "z", "B", "C", "x", "dt"}  # inputs in the compute dtype; the rest are float32 params


def _selective_scan_rows(ref, rng, dtype: str, batch: int, seq_len: int, d: int, n: int, gated: bool):
    """Our selective scan vs mamba-ssm's (delta_softplus, D, delta_bias; z when ``gated``), B/C of one group."""
    from torch_reference import ops

    act = lambda *shape: rounded(rng.normal(size=shape), dtype)  # noqa: E731
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    scan = {
        "u": act(batch, seq_len, d),
        "delta": rounded(rng.normal(-1, 0.7, (batch, seq_len, d)), dtype),
        "A": f32(-np.exp(rng.uniform(-4, 1, (d, n)))),
        "B": act(batch, seq_len, 1, n),
        "C": act(batch, seq_len, 1, n),
        "D": f32(rng.normal(size=d)),
        "z": act(batch, seq_len, d) if gated else None,
        "delta_bias": f32(rng.uniform(-3, -1, d)),
    }
    return _check_op(
        "selective_scan",
        partial(selective_scan_fn, delta_softplus=True),
        partial(ops.run_selective_scan, ref, delta_softplus=True),
        scan,
        dtype,
        rng,
    )


def _causal_conv1d_rows(ref, rng, dtype: str, batch: int, seq_len: int, channels: int, width: int):
    """Our causal conv1d (SiLU) vs mamba-ssm's, x (batch, seq_len, channels) and a (channels, width) filter."""
    from torch_reference import ops

    conv = {
        "x": rounded(rng.normal(size=(batch, seq_len, channels)), dtype),
        "weight": rounded(rng.uniform(-0.5, 0.5, (channels, width)), dtype),
        "bias": rounded(rng.uniform(-0.5, 0.5, channels), dtype),
    }
    return _check_op(
        "causal_conv1d",
        partial(causal_conv1d_fn, activation="silu"),
        partial(ops.run_causal_conv1d, ref, activation="silu"),
        conv,
        dtype,
        rng,
    )


def op_parity(
    ref,
    cfg: ModelConfig | MambaVisionConfig | GraphMambaConfig,
    *,
    dtype: str = "float32",
    batch: int = 2,
    seq_len: int = 64,
    seed: int = 0,
) -> list[Comparison]:
    """Our ops vs mamba-ssm's at the layer shapes of ``cfg``: the SSM op of its layer type (plus, for Mamba-2,
    ``ssd_minimal_discrete`` and the gated norm), and the causal conv. For MambaVision: the selective scan of a
    stage-3 mixer (no gate, N = 8) over a full window's tokens (``seq_len`` is not used). For Graph-Mamba: the
    global Mamba's gated selective scan and causal conv over ``batch`` graphs of ``seq_len`` nodes."""
    from torch_reference import ops

    rng = np.random.default_rng(seed)
    if isinstance(cfg, MambaVisionConfig):
        d, tokens = cfg.dim * 2**2 // 2, cfg.window_size[2] ** 2
        return _selective_scan_rows(ref, rng, dtype, batch, tokens, d, MIXER["d_state"], gated=False)
    if isinstance(cfg, GraphMambaConfig):
        d = cfg.expand * cfg.dim_hidden
        rows = _selective_scan_rows(ref, rng, dtype, batch, seq_len, d, cfg.d_state, gated=True)
        return rows + _causal_conv1d_rows(ref, rng, dtype, batch, seq_len, d, cfg.d_conv)
    s = cfg.ssm_cfg
    n = s.resolved_d_state()
    act = lambda *shape: rounded(rng.normal(size=shape), dtype)  # noqa: E731
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    rows: list[Comparison] = []
    if s.layer == "Mamba1":
        d = s.expand * cfg.d_model
        rows += _selective_scan_rows(ref, rng, dtype, batch, seq_len, d, n, gated=True)
        conv_channels = d
    else:
        d_ssm = s.expand * cfg.d_model if s.d_ssm is None else s.d_ssm
        h, p, g, q = d_ssm // s.headdim, s.headdim, s.ngroups, s.chunk_size
        if ref.mamba_chunk_scan_combined is None and seq_len % q:
            raise ValueError(
                f"the CPU fallback (ssd_chunk_scan_combined_ref) needs seq_len ({seq_len}) to be a "
                f"multiple of chunk_size ({q})"
            )
        ssd = {
            "x": act(batch, seq_len, h, p),
            "dt": act(batch, seq_len, h),
            "A": f32(-np.exp(rng.uniform(-3, 1, h))),
            "B": act(batch, seq_len, g, n),
            "C": act(batch, seq_len, g, n),
            "D": f32(rng.normal(size=h)),
            "dt_bias": f32(rng.uniform(-3, -1, h)),
        }
        rows += _check_op(
            "ssd",
            partial(mamba_chunk_scan_combined, chunk_size=q, dt_softplus=True),
            partial(ops.run_ssd, ref, chunk_size=q, dt_softplus=True),
            ssd,
            dtype,
            rng,
        )
        if seq_len % q == 0:
            plain = {k: ssd[k] for k in ("x", "A", "B", "C")} | {"dt": rounded(np.abs(ssd["dt"]) * 0.1, dtype)}
            rows += _check_op(
                "ssd vs ssd_minimal_discrete",
                partial(mamba_chunk_scan_combined, chunk_size=q),
                partial(ops.run_ssd, ref, chunk_size=q, dt_softplus=False, minimal=True),
                plain,
                dtype,
                rng,
            )
        norm = {
            "x": act(batch, seq_len, d_ssm),
            "weight": rounded(rng.normal(1, 0.2, d_ssm), dtype),
            "z": act(batch, seq_len, d_ssm),
        }
        options = dict(eps=1e-5, group_size=d_ssm // g, norm_before_gate=s.norm_before_gate)
        rows += _check_op(
            "rmsnorm_gated",
            partial(rmsnorm_fn, **options),
            partial(ops.run_rmsnorm_gated, ref, **options),
            norm,
            dtype,
            rng,
        )
        conv_channels = d_ssm + 2 * g * n  # the conv runs over xBC
    return rows + _causal_conv1d_rows(ref, rng, dtype, batch, seq_len, conv_channels, s.d_conv)


# ----------------------------------------------------------------------------------------------- report


def format_table(rows: list[Comparison], limit: int = 40) -> str:
    shown = (
        rows
        if len(rows) <= limit
        else [r for r in rows if not r.passed][:limit]
        + sorted((r for r in rows if r.passed), key=lambda r: -r.rel_l2_err / max(r.tolerance, 1e-30))[
            : max(0, limit - 10)
        ]
    )
    lines = [f"{'quantity':60s} {'max abs err':>12s} {'rel L2 err':>11s} {'tolerance':>9s}  pass"]
    lines += [
        f"{r.name[:60]:60s} {r.max_abs_err:12.3e} {r.rel_l2_err:11.3e} {r.tolerance:9.1e}  "
        f"{'yes' if r.passed else 'NO ' + r.note}"
        for r in shown
    ]
    if len(shown) < len(rows):
        lines.append(f"... {len(rows) - len(shown)} more rows (all passing) in the JSON")
    lines.append(f"{sum(r.passed for r in rows)} of {len(rows)} pass")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compare.parity", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default="mamba2-tiny", help="bundled config name or YAML path")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where mamba-ssm runs")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="op inputs and model compute dtype (bf16: torch autocast / our compute_dtype)",
    )
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq_len", type=int, default=64, help="LM tokens, image side, or nodes of the largest graph")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n_layer", type=int, help="override the config's layer count (e.g. 1 for one layer)")
    parser.add_argument("--ops-only", action="store_true", help="skip the model-level checks")
    parser.add_argument("--forward-only", action="store_true", help="model level: logits and loss only")
    parser.add_argument("--out", type=Path, help="JSON report path (default: parity-<config>-<dtype>.json)")
    args, overrides = parse_args_with_overrides(parser, argv)

    from torch_reference.backend import load

    ref = load(args.device)
    run_cfg = load_config(args.config, overrides)
    if args.n_layer:
        field = next((f for f in ("n_layer", "n_layers") if hasattr(run_cfg.model, f)), None)
        if field is None:
            parser.error(f"--n_layer: a {run_cfg.family} model has no layer count to override")
        run_cfg = load_config(args.config, [*overrides, f"--model.{field}={args.n_layer}"])
    cfg = run_cfg.model
    print(ref.describe())
    began = time.time()
    rows = op_parity(ref, cfg, dtype=args.dtype, batch=args.batch, seq_len=args.seq_len, seed=args.seed)
    if not args.ops_only:
        rows += model_parity(
            ref,
            run_cfg,
            compute_dtype=args.dtype,
            batch=args.batch,
            seq_len=args.seq_len,
            seed=args.seed,
            gradients=not args.forward_only,
        )
    print(format_table(rows))
    out = args.out or Path(f"parity-{Path(args.config).stem}-{args.dtype}.json")
    report = {
        "config": args.config,
        "model": dataclasses.asdict(cfg),
        "reference": ref.describe(),
        "device": ref.device,
        "jax_device": str(jax.devices()[0].device_kind),
        "dtype": args.dtype,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "seed": args.seed,
        "seconds": round(time.time() - began, 1),
        "rows": [r.as_dict() for r in rows],
    }
    out.write_text(json.dumps(report, indent=2, default=float))
    print(f"wrote {out}")
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
