"""compare.kernels: the cost model behind the floor, the tiling-variant parser, the timing loop; the command itself
needs a GPU and refuses to run without one."""

import dataclasses

import jax
import pytest

from compare.kernels import bench as kernels
from compare.kernels import ops as kernel_ops
from pallas_kernels.selective_scan.config import ScanConfig
from pallas_kernels.ssd.config import SsdConfig


def test_selective_scan_costs_at_the_130m_shape():
    costs = kernel_ops.selective_scan_costs(kernel_ops.OPS["selective_scan"].shapes["130m"], "bfloat16")
    act = 8 * 2048 * 1536 * 2  # one bf16 (batch, L, dim) tensor
    bc = 8 * 2048 * 16 * 2  # one bf16 (batch, L, 1, N) tensor
    params = 1536 * 16 * 4 + 2 * 1536 * 4
    assert costs["forward"] == {"bytes": 4 * act + 2 * bc + params, "flops": 0, "exps": 402_653_184}
    assert costs["forward+backward"]["exps"] == 2 * 402_653_184
    # forward, then the backward reads u, delta, z, B, C, dout and writes du, ddelta, dz, dB, dC
    assert costs["forward+backward"]["bytes"] == 11 * act + 6 * bc + 3 * params


def test_ssd_costs_at_the_130m_shape():
    costs = kernel_ops.ssd_costs(kernel_ops.OPS["ssd"].shapes["130m"], "bfloat16")
    act = 8 * 2048 * 24 * 64 * 2  # one bf16 (batch, L, H, P) tensor
    dt = 8 * 2048 * 24 * 2
    bc = 8 * 2048 * 128 * 2  # one bf16 (batch, L, 1, N) tensor
    # per chunk of 256: C·Bᵀ once per group, per head the intra-chunk product, the chunk state and its output
    flops = 2 * 8 * 2048 * (256 * 128 + 24 * (256 * 64 + 2 * 64 * 128))
    assert costs["forward"] == {
        "bytes": 3 * act + dt + 2 * bc + 3 * 24 * 4,
        "flops": flops,
        "exps": 8 * 2048 * 24 * 256,
    }
    assert costs["forward+backward"]["flops"] == 3 * flops
    # the backward reads x, z, dout, dt, B, C and writes dx, dz, ddt, dB, dC
    assert costs["forward+backward"]["bytes"] == costs["forward"]["bytes"] + 5 * act + 2 * dt + 4 * bc + 6 * 24 * 4


def test_floor_is_the_slowest_of_memory_matmul_and_sfu():
    ceiling = {"copy_gbs": 1000.0, "matmul_tflops": 100.0, "exp_per_s": 1e12}
    assert kernels.floor_ms({"bytes": 1e9, "flops": 1e9, "exps": 1e6}, ceiling) == 1.0  # memory: 1 GB at 1 TB/s
    assert kernels.floor_ms({"bytes": 1.0, "flops": 1e12, "exps": 1e6}, ceiling) == 10.0  # matmul
    assert kernels.floor_ms({"bytes": 1.0, "flops": 0, "exps": 3e9}, ceiling) == 3.0  # exps


def test_pallas_config_variants_parse_and_validate():
    variant = kernels.parse_config("block_d=8,chunk=16")
    assert variant.impl == "pallas" and variant.config == ScanConfig(block_d=8, chunk=16)
    with pytest.raises(SystemExit, match="unknown field 'blockd'"):
        kernels.parse_config("blockd=8")
    with pytest.raises(ValueError, match="block_d must be a positive power of two"):
        kernels.parse_config("block_d=12")
    ssd = kernel_ops.OPS["ssd"]
    variant = kernels.parse_config("block_l=32,fused_forward_max_l=0,bwd_num_warps=4", ssd)
    assert variant.config == SsdConfig(block_l=32, fused_forward_max_l=0, bwd_num_warps=4)
    with pytest.raises(ValueError, match="fused_forward_max_l must be an int >= 0, got -1"):
        kernels.parse_config("fused_forward_max_l=-1", ssd)
    with pytest.raises(SystemExit, match="unknown field 'block_d'"):
        kernels.parse_config("block_d=8", ssd)
    assert kernels.parse_config("shared_scores=true", ssd).config.shared_scores is True
    assert kernels.parse_config("shared_scores=0", ssd).config.shared_scores is False
    with pytest.raises(SystemExit, match="shared_scores takes true/false/1/0, got '2'"):
        kernels.parse_config("shared_scores=2", ssd)
    variant = kernels.parse_config("design=chunked,bwd_design=chunked,rows=8,bwd_rows=16,segments=3")
    assert variant.config == ScanConfig(design="chunked", bwd_design="chunked", rows=8, bwd_rows=16, segments=3)
    with pytest.raises(ValueError, match="design must be one of"):
        kernels.parse_config("design=parallel")


def test_pallas_config_variant_lays_its_fields_over_each_shapes_default():
    """Naming one field changes only it: the rest is what impl="pallas" picks at that shape (here the split
    forward at 64 programs, the fused one at 192)."""
    ssd = kernel_ops.OPS["ssd"]
    variant = kernels.parse_config("bwd_num_warps=2", ssd)
    for shape in ((2, 8192, 32, 64, 256, 4, 128), (8, 2048, 24, 64, 128, 1, 256)):
        resolved = kernels.for_shape(variant, ssd, shape, "bfloat16").config
        assert resolved == dataclasses.replace(ssd.shape_config(shape, "bfloat16"), bwd_num_warps=2)
    assert kernels.for_shape(variant, ssd, (2, 8192, 32, 64, 256, 4, 128), "bfloat16").config.fused_forward_max_l == 0
    scan = kernels.parse_config("block_d=8")
    assert kernels.for_shape(scan, kernel_ops.OPS["selective_scan"], (1, 64, 32, 16, 1), "bfloat16") is scan


def test_extra_shapes_parse_with_the_ops_fields():
    op = kernel_ops.OPS["selective_scan"]
    assert kernels.parse_shapes(["b1=1,4096,768,16,1"], op) == {"b1": (1, 4096, 768, 16, 1)}
    for bad in ("b1=1,4096,768,16", "=1,2,3,4,5", "b1=1,2,x,4,5", "b1=0,2,3,4,5"):
        with pytest.raises(SystemExit, match="--shape: expected NAME= then 5 positive integers"):
            kernels.parse_shapes([bad], op)


def test_extra_shapes_run_besides_the_named_ones():
    """A --shape extra always runs: after the --shapes names, or after every bundled shape without them."""
    extras = {"b1": (1, 4096, 768, 16, 1)}
    op = dataclasses.replace(
        kernel_ops.OPS["selective_scan"], shapes={**kernel_ops.OPS["selective_scan"].shapes, **extras}
    )
    assert kernels.shapes_to_run(["130m"], extras, op) == ["130m", "b1"]
    assert kernels.shapes_to_run(["b1", "130m"], extras, op) == ["b1", "130m"]
    assert kernels.shapes_to_run(None, extras, op) == list(op.shapes)
    assert kernels.shapes_to_run(None, {}, kernel_ops.OPS["selective_scan"]) == list(
        kernel_ops.OPS["selective_scan"].shapes
    )


def test_median_ms_times_back_to_back_calls():
    calls = []
    ms = kernels.median_ms(lambda: calls.append(1), lambda _: None, reps=3, target_ms=1.0)
    assert ms >= 0.0 and len(calls) >= 3 + 4  # warm-up calls, then at least one per repetition


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="checks the refusal without a GPU")
def test_command_needs_a_gpu():
    with pytest.raises(SystemExit, match="JAX sees no GPU"):
        kernels.main(["--shapes", "130m"])
    with pytest.raises(SystemExit, match=r"unknown \['1.4b'\] for --op ssd"):
        kernels.main(["--op", "ssd", "--shapes", "1.4b"])


def test_mamba_ssm_calls_time_and_match_our_reference(cpu_reference):
    """The torch side on mamba-ssm's CPU fallback: its output equals ours on the same values; both passes time."""
    import jax.numpy as jnp

    from compare.parity.tolerances import assert_close
    from pallas_kernels import selective_scan_fn
    from torch_reference.kernel_calls import selective_scan_calls

    arrays, dtypes, cotangent = kernel_ops.selective_scan_inputs((2, 19, 8, 4, 1), "float32", seed=3)
    calls = selective_scan_calls(cpu_reference, arrays, dtypes, cotangent, delta_softplus=True)
    ours = selective_scan_fn(**{k: jnp.asarray(v) for k, v in arrays.items()}, delta_softplus=True)
    assert_close("mamba-ssm output", calls.output, ours, jnp.float32)
    timed = kernels.time_passes(calls.forward, calls.forward_backward, calls.sync, reps=2)
    assert set(timed) == {"forward", "forward+backward"} and all(ms > 0 for ms in timed.values())


def test_mamba_ssm_ssd_calls_time_and_match_our_reference(cpu_reference):
    """The SSD torch side on mamba-ssm's CPU fallback (its chunked torch reference) against our reference."""
    import jax.numpy as jnp

    from compare.parity.tolerances import assert_close
    from pallas_kernels import mamba_chunk_scan_combined
    from torch_reference.kernel_calls import ssd_calls

    shape = (2, 32, 4, 8, 16, 2, 16)
    arrays, dtypes, cotangent = kernel_ops.ssd_inputs(shape, "float32", seed=4)
    calls = ssd_calls(cpu_reference, arrays, dtypes, cotangent, chunk_size=16)
    a = {k: jnp.asarray(v) for k, v in arrays.items()}
    ours = mamba_chunk_scan_combined(
        a["x"], a["dt"], a["A"], a["B"], a["C"], 16, D=a["D"], z=a["z"], dt_bias=a["dt_bias"], dt_softplus=True
    )
    assert_close("mamba-ssm output", calls.output, ours, jnp.float32)
    timed = kernels.time_passes(calls.forward, calls.forward_backward, calls.sync, reps=2)
    assert set(timed) == {"forward", "forward+backward"} and all(ms > 0 for ms in timed.values())


def test_per_kernel_times_sum_device_events_per_call():
    """The profile reader sums each kernel's events over the GPU planes only, divides by the calls, largest first."""
    from types import SimpleNamespace as NS

    from compare.kernels.launches import per_call_us

    def plane(name, events):
        return NS(name=name, lines=[NS(events=[NS(name=n, start_ns=0, duration_ns=d, stats=[]) for n, d in events])])

    profile = NS(
        planes=[
            plane("/device:GPU:0", [("ssd_bwd", 4000), ("ssd_fwd_out", 1000), ("ssd_bwd", 2000)]),
            plane("/device:GPU:0 streams", [("ssd_fwd_out", 1000)]),
            plane("/host:CPU", [("python", 10**9)]),
        ]
    )
    times = per_call_us(profile, calls=2)
    assert times == {"ssd_bwd": 3.0, "ssd_fwd_out": 1.0}
    assert list(times) == ["ssd_bwd", "ssd_fwd_out"]


def test_launch_gaps_put_each_idle_stretch_before_the_kernel_that_ends_it():
    """Idle time counts from the GPU's last busy moment (an overlapped kernel does not reset it), per call."""
    from compare.kernels.launches import launch_gaps

    launches = [  # (kernel, instruction, start ns, duration ns), out of order as a trace's lines give them
        ("walk", "", 10_000, 6_000),
        ("fusion", "", 0, 4_000),
        ("overlapped", "", 11_000, 1_000),  # inside walk: no idle before it, and walk's end still counts
        ("bwd", "", 20_000, 2_000),  # 4 us after walk's end
        ("walk", "", 23_000, 1_000),  # 1 us after bwd
    ]
    gaps = launch_gaps(launches, calls=2)
    assert gaps["span"] == pytest.approx(24.0 / 2)
    assert gaps["kernels"] == pytest.approx(14.0 / 2)
    assert gaps["busy"] == pytest.approx(13.0 / 2)
    assert gaps["idle_before"] == pytest.approx({"walk": 7.0 / 2, "bwd": 4.0 / 2})
    assert list(gaps["idle_before"]) == ["walk", "bwd"]
    assert launch_gaps([], calls=3) == {"span": 0.0, "kernels": 0.0, "busy": 0.0, "idle_before": {}}


def test_saved_bytes_count_residuals_but_not_forwarded_inputs():
    import jax.numpy as jnp

    x = jnp.ones((4, 8), jnp.float32)
    assert kernel_ops.saved_beyond_inputs(jnp.sin, [x]) == 4 * 8 * 4  # cos(x), same shape as x yet not x
    assert kernel_ops.saved_beyond_inputs(lambda a, b: a * b, [x, x + 1]) == 0  # both inputs kept as they are
    arrays, dtypes, _ = kernel_ops.selective_scan_inputs((2, 512, 64, 16, 1), "bfloat16", seed=0)
    inputs = [jnp.asarray(arrays[k], dtypes[k]) for k in arrays]

    def scan(config):
        return lambda *xs: kernel_ops.selective_scan_fn(
            **dict(zip(arrays, xs, strict=True)), delta_softplus=True, impl="pallas", config=config
        )

    kept = ScanConfig(design="chunked", bwd_design="chunked", block_d=8, rows=8, bwd_rows=8, checkpoint_every=256)
    every = dataclasses.replace(kept, checkpoint_every=0)
    assert kernel_ops.saved_beyond_inputs(scan(kept), inputs) == 2 * 2 * 16 * 65 * 4  # (batch, L/256, N, dim + 1)
    assert kernel_ops.saved_beyond_inputs(scan(every), inputs) == 2 * 64 * 16 * 65 * 4  # every 8 steps


def test_mamba_ssm_saved_bytes_count_autograd_saved_tensors(cpu_reference):
    import torch

    from torch_reference.kernel_calls import saved_beyond_inputs

    x = torch.ones(4, 8, requires_grad=True)
    assert saved_beyond_inputs(lambda: torch.sin(x), [x]) == 0  # sin saves its input
    assert saved_beyond_inputs(lambda: torch.sin(x * 2), [x]) == 4 * 8 * 4  # ... here a new tensor


def test_conv_op_costs_inputs_and_jax_calls():
    """The conv op: bytes of the 130m shape, inputs in their dtypes; both impls run on the CPU, and the Pallas one
    keeps only its inputs for the backward where XLA's autodiff of the reference keeps float32 intermediates."""
    import numpy as np

    op = kernel_ops.OPS["causal_conv1d"]
    act = 8 * 2048 * 1536 * 2
    assert op.costs(op.shapes["130m"], "bfloat16")["forward+backward"]["bytes"] == 5 * act
    arrays, dtypes, cotangent = op.inputs((2, 9, 4, 4), "bfloat16", seed=0)
    assert set(arrays) == {"x", "weight", "bias"} and dtypes["weight"] == "float32"
    reference, pallas = (
        op.jax_calls(kernel_ops.Variant(impl, impl), arrays, dtypes, cotangent, (2, 9, 4, 4))
        for impl in ("reference", "pallas")
    )
    assert pallas.output.shape == (2, 9, 4) and np.isfinite(pallas.output).all()
    np.testing.assert_allclose(pallas.output, reference.output, rtol=1e-2, atol=1e-2)
    assert pallas.saved_bytes == 0 and reference.saved_bytes > 0


def test_mamba3_op_costs_inputs_and_refusals():
    """The Mamba-3 op: bytes of the 130m shape, inputs in their dtypes and ranges, our kernels timed by default (they
    run interpreted on the CPU) and no tiling variants."""
    import numpy as np

    op = kernel_ops.OPS["mamba3"]
    costs = op.costs(op.shapes["130m"], "bfloat16")
    steps = 8 * 2048
    inputs = steps * (2 * 128 * 2 + 2 * 24 * 64 * 2 + 3 * 24 * 4 + 24 * 32 * 4)
    assert costs["forward"]["bytes"] == inputs + steps * 24 * 64 * 2
    assert costs["forward+backward"]["bytes"] == 3 * inputs + 2 * steps * 24 * 64 * 2
    shape = (1, 9, 2, 4, 8, 1, 2, 4)
    arrays, dtypes, cotangent = op.inputs(shape, "bfloat16", seed=0)
    assert set(arrays) == set(kernel_ops.MAMBA3_ARGS) and dtypes["V"] == "bfloat16" and dtypes["DT"] == "float32"
    assert (arrays["ADT"] < 0).all() and (arrays["DT"] > 0).all() and cotangent.shape == arrays["V"].shape
    assert op.impls == ("pallas",)
    calls = op.jax_calls(kernel_ops.Variant("pallas", "pallas"), arrays, dtypes, cotangent, shape)
    assert calls.output.shape == (1, 9, 2, 4) and np.isfinite(calls.output).all()
    with pytest.raises(SystemExit, match="--op mamba3 has no tiling config"):
        kernels.parse_config("block_l=32", op)


def test_mamba3_step_op_times_a_compiled_decoding_loop_forward_only():
    """The decoding step: its output is the reference step's from the given states; a timed call runs
    DECODE_LOOP_STEPS steps in one compiled loop, each on the states and (as V) the output of the step before, and
    its time is divided by them; no backward is timed."""
    import jax.numpy as jnp

    from compare.parity.tolerances import assert_close
    from pallas_kernels.mamba3 import reference

    op = kernel_ops.OPS["mamba3_step"]
    assert op.impls == ("pallas", "reference")  # the step kernel beside XLA's fusion of the reference
    shape = (3, 2, 8, 16, 1, 4)
    arrays, dtypes, cotangent = op.inputs(shape, "bfloat16", seed=1)
    assert cotangent is None and arrays["ssm"].shape == (3, 2, 8, 16) and arrays["Q"].shape == (3, 1, 16)
    args = {k: jnp.asarray(arrays[k], dtypes[k]) for k in kernel_ops.MAMBA3_ARGS}
    states = tuple(jnp.asarray(arrays[k]) for k in kernel_ops.MAMBA3_STATES)
    expected, _ = reference.mamba3_siso_step(**args, states=states)
    calls = op.jax_calls(kernel_ops.Variant("reference", "reference"), arrays, dtypes, cotangent, shape)
    assert calls.forward_backward is None and calls.steps_per_call == kernel_ops.DECODE_LOOP_STEPS
    assert_close("step output", calls.output, expected.astype(jnp.float32), jnp.bfloat16)
    assert calls.forward().shape == args["V"].shape
    timed = kernels.time_passes(calls.forward, calls.forward_backward, kernels.jax_sync, reps=2, sample_ms=1.0)
    assert set(timed) == {"forward"} and timed["forward"] > 0
    assert kernels.per_step(timed, calls.steps_per_call) == {"forward": timed["forward"] / calls.steps_per_call}
    costs = op.costs(op.shapes["130m-b1"], "bfloat16")["forward"]
    assert costs["bytes"] > 2 * 24 * 64 * 128 * 4  # the float32 ssm state read and written


def test_decode_loop_runs_each_steps_inputs_on_the_states_before():
    """``decode_loop`` over three steps of their own inputs (``over_steps``) equals the steps one after another,
    each from the states the one before returned; the steps' inputs differ."""
    import jax.numpy as jnp
    import numpy as np

    from pallas_kernels.mamba3 import reference

    op = kernel_ops.OPS["mamba3_step"]
    arrays, dtypes, _ = op.inputs((2, 2, 8, 16, 1, 4), "float32", seed=3)
    args = {k: jnp.asarray(arrays[k], dtypes[k]) for k in kernel_ops.MAMBA3_ARGS}
    states = tuple(jnp.asarray(arrays[k]) for k in kernel_ops.MAMBA3_STATES)
    inputs = kernel_ops.over_steps(arrays, kernel_ops.MAMBA3_STEP_INPUTS, steps=3)
    assert set(inputs) == set(kernel_ops.MAMBA3_STEP_INPUTS) and inputs["V"].shape == (3, *arrays["V"].shape)
    assert np.abs(inputs["V"][2] - inputs["V"][0]).max() > 0

    def step(step_inputs, carried):
        out, new = reference.mamba3_siso_step(**(args | step_inputs), states=carried)
        return out, tuple(new)

    carried = states
    for i in range(3):
        out, carried = step({k: jnp.asarray(v[i]) for k, v in inputs.items()}, carried)
    looped = kernel_ops.decode_loop(step, {k: jnp.asarray(v) for k, v in inputs.items()}, states)()
    np.testing.assert_allclose(np.asarray(looped), np.asarray(out), rtol=1e-5, atol=1e-6)
    first = step({k: jnp.asarray(v[0]) for k, v in inputs.items()}, states)[0]
    assert np.abs(np.asarray(out) - np.asarray(first)).max() > 1e-3  # three steps, not one


def test_jax_forward_backward_returns_the_output_with_the_gradients():
    """The timed forward+backward returns the op's output beside the gradients, as a training step's loss reads it:
    with the gradients alone XLA may drop forward kernels whose results the backward does not keep (the SSD's forward
    walk, once its backward recomputed the pre-gate output)."""
    import numpy as np

    op = kernel_ops.OPS["causal_conv1d"]
    arrays, dtypes, cotangent = op.inputs((2, 9, 4, 4), "float32", seed=1)
    calls = op.jax_calls(kernel_ops.Variant("reference", "reference"), arrays, dtypes, cotangent, (2, 9, 4, 4))
    out, grads = calls.forward_backward()
    # compiled apart from the forward alone: its own rounding
    np.testing.assert_allclose(np.asarray(out, np.float32), calls.output, rtol=1e-5, atol=1e-6)
    assert len(grads) == len(arrays) and all(np.isfinite(np.asarray(g)).all() for g in grads)


def test_rmsnorm_gated_op_costs_inputs_and_both_sides(cpu_reference):
    """The gated norm op: bytes at the 780m shape; JAX's two impls and mamba-ssm's norm (its torch reference on the
    CPU) give the same output, and the Pallas one keeps only its inputs for the backward."""
    import numpy as np

    op = kernel_ops.OPS["rmsnorm_gated"]
    act = 16384 * 3072 * 2
    assert op.costs(op.shapes["780m"], "bfloat16")["forward+backward"]["bytes"] == 8 * act
    shape = (13, 16, 2)
    arrays, dtypes, cotangent = op.inputs(shape, "float32", seed=0)
    assert set(arrays) == {"x", "weight", "z"} and dtypes["weight"] == "float32"
    reference, pallas = (
        op.jax_calls(kernel_ops.Variant(impl, impl), arrays, dtypes, cotangent, shape)
        for impl in ("reference", "pallas")
    )
    torch_side = op.torch_calls(cpu_reference, arrays, dtypes, cotangent, shape)
    assert pallas.output.shape == (13, 16) and np.isfinite(pallas.output).all()
    np.testing.assert_allclose(pallas.output, reference.output, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(torch_side.output, reference.output, rtol=1e-5, atol=1e-5)
    assert pallas.saved_bytes == 0


def test_speed_up_is_against_the_faster_pytorch_figure():
    """mamba-ssm timed eagerly and replayed as a CUDA graph: each pass's speed-up is against the faster of the two,
    named; the report marks a replayed reference "(graph)"."""
    from compare.kernels.bench import TORCH_GRAPHED, fastest_reference, markdown

    timed = {
        "mamba-ssm": {"forward": 1.0, "forward+backward": 4.0},
        TORCH_GRAPHED: {"forward": 1.2, "forward+backward": 1.5},
        "pallas": {"forward": 0.5, "forward+backward": 0.6},
    }
    assert fastest_reference(timed, "forward") == ("mamba-ssm", 1.0)
    assert fastest_reference(timed, "forward+backward") == (TORCH_GRAPHED, 1.5)
    assert fastest_reference({"pallas": timed["pallas"]}, "forward") == (None, None)
    row = {"shape": "s", "pass": "forward+backward", "impl": "pallas", "ms": 0.6, "speedup_vs_mamba_ssm": 2.5,
           "mamba_ssm_fastest": TORCH_GRAPHED, "effective_gbs": 1.0, "tflops": 1.0, "floor_ms": 0.1,
           "times_floor": 6.0, "saved_mb": None, "kernel_us": {"k": 500.0}, "kernel_sum_us": 500.0}  # fmt: skip
    meta = {"op": "ssd", "device": {"device": "GPU", "sm_count": 1, "sm_clock_mhz": 1}, "command": "c", "date": "d",
            "copy_gbs": 1.0, "exp_per_s": 1.0, "matmul_tflops": 1.0}  # fmt: skip
    text = markdown([row], meta)
    assert "| s | forward+backward | pallas | 0.600 | 2.50x (graph) |" in text and "(kernels' sum 500)" in text


def test_a_pass_that_cannot_be_captured_keeps_its_eager_figure(monkeypatch):
    """A pass whose CUDA-graph capture fails is left out of the replayed figures with the first error's first line
    (not the capture's closing error); its speed-up is then against the eager figure, and the report says why."""
    from compare.kernels import bench as kernels
    from torch_reference import step_modes

    def forward():
        return 1

    def forward_backward():
        return 2

    def replayed(fn):
        if fn is forward:
            return fn
        try:
            raise RuntimeError("CUDA error: operation would make the legacy stream depend on a capturing stream\nmore")
        except RuntimeError:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture") from None

    monkeypatch.setattr(step_modes, "replayed", replayed)
    timed, failed = kernels.time_replayed(forward, forward_backward, lambda out: None, reps=2, sample_ms=1.0)
    assert set(timed) == {"forward"}
    assert failed == {
        "forward+backward": "CUDA error: operation would make the legacy stream depend on a capturing stream"
    }
    both = {"mamba-ssm": {"forward": 2.0, "forward+backward": 4.0}, kernels.TORCH_GRAPHED: {"forward": 1.0}}
    assert kernels.fastest_reference(both, "forward") == (kernels.TORCH_GRAPHED, 1.0)
    assert kernels.fastest_reference(both, "forward+backward") == ("mamba-ssm", 4.0)
    row = {"shape": "s", "pass": "forward+backward", "impl": "mamba-ssm", "ms": 4.0, "speedup_vs_mamba_ssm": 1.0,
           "mamba_ssm_fastest": "mamba-ssm", "effective_gbs": 1.0, "tflops": 1.0, "floor_ms": 0.1,
           "times_floor": 40.0, "saved_mb": None, "cuda_graph_failure": failed["forward+backward"]}  # fmt: skip
    meta = {"op": "mamba3", "device": {"device": "GPU", "sm_count": 1, "sm_clock_mhz": 1}, "command": "c",
            "date": "d", "copy_gbs": 1.0, "exp_per_s": 1.0, "matmul_tflops": 1.0}  # fmt: skip
    assert "- s forward+backward: CUDA error: operation would make" in kernels.markdown([row], meta)


@pytest.mark.gpu
def test_replayed_calls_give_the_eager_results():
    """A call captured once in a CUDA graph and replayed returns what the eager call returns, and a replay after the
    inputs change in place computes on the new values."""
    import torch

    from torch_reference.step_modes import replayed

    x = torch.randn(4, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda")
    replay = replayed(lambda: torch.relu(x @ w))
    torch.testing.assert_close(replay(), torch.relu(x @ w))
    x.copy_(torch.randn_like(x))
    torch.testing.assert_close(replay(), torch.relu(x @ w))


def test_results_go_to_the_device_folder():
    from compare.kernels.bench import device_folder

    assert device_folder("NVIDIA H200") == "h200"
    assert device_folder("NVIDIA H100 80GB HBM3") == "h100"
    assert device_folder("NVIDIA A100-SXM4-80GB") == "a100"
    assert device_folder("Some GPU") == "some-gpu"


@pytest.mark.parametrize("family", [1, 2])
def test_state_update_op_carries_its_state_and_both_kernels_agree(family):
    """The selective state update op: the layers' layouts (Mamba-1 without heads, Mamba-2 with per-head values),
    its output the reference step's from the given state, the Mosaic GPU kernel (a --pallas-config variant) beside
    it, a timed call a compiled loop of steps; the float32 state dominates the bytes."""
    import jax.numpy as jnp
    import numpy as np

    from compare.parity.tolerances import assert_close
    from pallas_kernels.selective_state_update.config import StateUpdateConfig

    op = kernel_ops.OPS["selective_state_update"]
    shape = (2, 1, 64, 8, 1, 1) if family == 1 else (2, 4, 64, 16, 2, 2)
    arrays, dtypes, cotangent = op.inputs(shape, "bfloat16", seed=2)
    assert cotangent is None and arrays["state"].ndim == (3 if family == 1 else 4) and dtypes["x"] == "bfloat16"
    outputs = {}
    for label, impl, config in (
        ("reference", "reference", None),
        ("mosaic", "pallas", StateUpdateConfig(backend="mosaic_gpu")),
    ):
        calls = op.jax_calls(kernel_ops.Variant(label, impl, config), arrays, dtypes, cotangent, shape)
        assert calls.forward_backward is None and calls.steps_per_call == kernel_ops.DECODE_LOOP_STEPS
        outputs[label] = calls.output
        assert np.isfinite(np.asarray(calls.forward().astype(jnp.float32))).all()
    assert_close("mosaic step", outputs["mosaic"], outputs["reference"], jnp.bfloat16)
    costs = op.costs(op.shapes["mamba2-780m-b64"], "bfloat16")["forward"]
    assert costs["bytes"] > 2 * 64 * 48 * 64 * 128 * 4
