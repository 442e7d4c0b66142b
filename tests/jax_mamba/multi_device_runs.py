"""Trainings on several host CPU devices, run by test_multi_device.py in a process of its own (JAX's device count is
fixed when it starts): ``python -m tests.jax_mamba.multi_device_runs OUT_JSON``. Each run trains a tiny config for a
few steps on a mesh and records its per-step losses and final parameters' digest."""

import contextlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import jax
import numpy as np
from jax.experimental.compilation_cache import compilation_cache

from jax_mamba.checkpoints.run_dir import CHECKPOINT_DIR
from jax_mamba.configs.loader import load_config
from jax_mamba.tasks import task_for
from jax_mamba.train.loop import train
from jax_mamba.train.mesh_training import mesh_training
from jax_mamba.train.sharding import make_mesh, param_sharding
from jax_mamba.train.step import init_training
from tests import interpreter_callbacks
from tests.jax_mamba.training_runs import QUIET, losses, records

STEPS = ["--max_steps=3", "--log_every=1", "--eval_every=3", "--save_every=3", "--eval_batches=1"]
# One Mamba layer each (the hybrid: one Mamba layer, then its attention layer): what the meshes split is the same in
# every layer, and each layer more only lengthens the compilations.
ONE_LAYER = ["--n_layer=1"]
MODELS = {
    "mamba1": ("mamba1-tiny", ONE_LAYER),
    "mamba2": ("mamba2-tiny", ONE_LAYER),
    "hybrid": ("hybrid-tiny", ["--n_layer=2"]),
    "mamba2-pallas": ("mamba2-tiny", [*ONE_LAYER, "--model.impl=pallas", "--seq_len=32"]),
}
CHUNKED = ["--loss_chunk_tokens=48"]  # LM head and loss over chunks of 48 positions a device (batch 8 x 64)
MODELS["mamba2-chunked"] = ("mamba2-tiny", [*ONE_LAYER, *CHUNKED])
XLA = ["--mesh.fsdp_gather=xla"]  # FSDP left to XLA's partitioner (the default gathers split parameters whole)
# The hybrid's Mamba-2 layers under XLA's partitioner on data x FSDP, and pure FSDP with the chunked loss: together
# what a plain Mamba-2 run left to XLA would cover.
MODELS.update({f"{m}-xla": (MODELS[m][0], MODELS[m][1] + XLA) for m in ("hybrid", "mamba2-chunked")})
EARLY = ["--mesh.grad_reduce=early"]  # per-device gradients summed explicitly, weight gradients tied to their layer
MODELS.update({f"{m}-early": (MODELS[m][0], MODELS[m][1] + EARLY) for m in ("mamba1", "mamba2-pallas")})
# name: (model, data, fsdp, context). Each model on one device and on meshes of 4 or 8 that split its rows over data
# and FSDP together (Mamba-2: positions too). Pure data parallelism: the "early" runs (Mamba-1 and the Pallas step);
# pure FSDP: the chunked loss's and XLA's partitioner's runs.
MESHES = {
    **{f"{m}-1x1x1": (m, 1, 1, 1) for m in ("mamba1", "mamba2", "hybrid")},
    **{f"{m}-2x4x1": (m, 2, 4, 1) for m in ("mamba1", "mamba2", "hybrid")},
    "mamba2-1x1x4": ("mamba2", 1, 1, 4),  # context parallel: each sequence over 4 devices
    "mamba2-2x2x2": ("mamba2", 2, 2, 2),
    "mamba2-pallas-1x1x1": ("mamba2-pallas", 1, 1, 1),
    "mamba2-pallas-2x2x2": ("mamba2-pallas", 2, 2, 2),
    # compared with their model's one-device run (the names start with it)
    "mamba2-chunked-1x1x1": ("mamba2-chunked", 1, 1, 1),
    "mamba2-chunked-1x4x1": ("mamba2-chunked", 1, 4, 1),  # pure FSDP, weights gathered whole: per-device chunks
    "mamba2-chunked-2x2x2": ("mamba2-chunked", 2, 2, 2),  # strided chunks, rows and positions split
    "mamba2-chunked-xla-1x4x1": ("mamba2-chunked-xla", 1, 4, 1),  # pure FSDP left to XLA: whole-row chunks
    "hybrid-xla-2x4x1": ("hybrid-xla", 2, 4, 1),
    "mamba1-early-4x1x1": ("mamba1-early", 4, 1, 1),
    "mamba2-pallas-early-2x1x1": ("mamba2-pallas-early", 2, 1, 1),  # the Pallas kernels inside the per-device step
}


def run(model: str, data: int, fsdp: int, context: int, folder: Path, extra=(), resume=False) -> dict:
    config, overrides = MODELS[model]
    mesh = [f"--mesh.data={data}", f"--mesh.fsdp={fsdp}", f"--mesh.context={context}"]
    cfg = load_config(config, [*QUIET, *STEPS, *overrides, *mesh, *extra])
    result = train(cfg, run_dir=folder, resume=resume, echo=lambda *_: None)
    norms = {r["step"]: r["grad_norm"] for r in records(folder) if "grad_norm" in r and "event" not in r}
    evaluation = result.eval.get("eval_loss")
    return {"losses": losses(folder), "grad_norms": norms, "eval": evaluation, "traces": result.traces}


def sharded_init() -> dict:
    """Mamba-2's initial parameters and AdamW state made on an FSDP mesh of 8 against one device: the largest
    difference, how many arrays are not held as ``param_sharding`` says, and the largest share of a whole array any
    device holds (1/8 where every array splits)."""
    cfg = load_config("mamba2-tiny", [*QUIET, "--mesh.data=1", "--mesh.fsdp=8"])
    task = task_for(cfg)
    mesh = make_mesh(cfg.mesh)
    with jax.set_mesh(mesh):
        on_mesh = init_training(cfg, task, mesh)
    alone = init_training(cfg, task)
    trees = [(on_mesh.params, alone.params), (on_mesh.opt_state, alone.opt_state)]
    pairs = [(a, b) for mine, ref in trees for a, b in zip(jax.tree.leaves(mine), jax.tree.leaves(ref), strict=True)]
    split = [a for a, _ in pairs if a.ndim and param_sharding(mesh, a.shape).spec != jax.sharding.PartitionSpec()]
    return {
        "max_diff": max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)), initial=0.0)) for a, b in pairs),
        "misplaced": sum(a.sharding.spec != param_sharding(mesh, a.shape).spec for a, _ in pairs if a.ndim),
        "split_arrays": len(split),
        "largest_share": max(a.addressable_shards[0].data.size / a.size for a in split),
    }


def data_parallel_collectives() -> dict[str, int]:
    """Collectives in Mamba-2's compiled train step on a data-parallel mesh of 8 with the loss over chunks: no
    all-gather is needed (parameters are whole on every device, rows split), and none belongs inside a loop
    (``in_loops``: in any computation but the entry one). Chunks of whole rows, each held by one device, made every
    device gather and compute the LM head of the whole batch; the chunk loop's transpose, left to XLA, all-reduced
    the head's weight gradient once per chunk."""
    cfg = load_config("mamba2-tiny", [*QUIET, *ONE_LAYER, *CHUNKED, "--mesh.data=8"])
    with mesh_training(cfg) as (_, _, setup, batches):
        args = (setup.params, setup.opt_state, setup.state, batches(0), np.int32(0))
        text = setup.train_step.lower(*args).compile().as_text()
    collective = re.compile(r" (all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(-start)?\(")
    in_loops, entry = 0, False
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith("{"):  # a computation's header
            entry = line.startswith("ENTRY")
        elif not entry and collective.search(line):
            in_loops += 1
    return {"all_gathers": text.count(" all-gather("), "in_loops": in_loops}


@contextlib.contextmanager
def compiled_afresh():
    """Compiles inside skip the persistent compilation cache: a program loaded from it runs none of XLA's passes, so
    dumps them none (JAX leaves the dump options out of its cache key)."""
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()  # JAX decides once per process whether to use the cache: decide again
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", True)
        compilation_cache.reset_cache()


def partitioned_step(cfg) -> tuple[str, list[str]]:
    """``cfg``'s train step as XLA's SPMD partitioning leaves it (its dump: later CPU passes widen bf16 collectives
    and turn optimization barriers into control dependencies), and the shapes of the matmul weights the model
    computes with in the compute dtype (``ParamLayout.compute_casts``)."""
    with mesh_training(cfg) as (_, _, setup, batches), tempfile.TemporaryDirectory() as dump:
        args = (setup.params, setup.opt_state, setup.state, batches(0), np.int32(0))
        options = {"xla_dump_to": dump, "xla_dump_hlo_pass_re": "spmd-partitioning"}
        with compiled_afresh():
            setup.train_step.lower(*args).compile(compiler_options=options)
        (partitioned,) = Path(dump).glob("*after_spmd-partitioning*")
        text = partitioned.read_text()
    kernels = sorted({",".join(map(str, setup.params[name].shape)) for name, _ in setup.layout.compute_casts})
    return text, kernels


def collective_types(text: str, op: str) -> list[tuple[str, str]]:
    """The (shape, dtype) of every ``op`` collective in an HLO text."""
    found = re.findall(rf"= (\w+)\[([0-9,]*)\]\S* {op}(?:-start)?\(", text)
    return sorted({(shape, dtype) for dtype, shape in found})


def gathered_in_bf16() -> dict:
    """FSDP with whole-parameter gathers (the default ``mesh.fsdp_gather``) and bf16 compute (data 4 x fsdp 2): the
    (shape, dtype) of every all-gather in the step's partitioned program, against the shapes of the matmul weights
    the model computes with in bf16."""
    cfg = load_config("mamba2-tiny", [*QUIET, *ONE_LAYER, "--model.compute_dtype=bfloat16", "--mesh.fsdp=2"])
    text, kernels = partitioned_step(cfg)
    return {"gathers": collective_types(text, "all-gather"), "kernels": kernels}


def early_grad_reduce() -> dict:
    """Mamba-1's train step on a data-parallel mesh of 4 with bf16 compute, gradients reduced by XLA and "early":
    the optimization barriers in each partitioned program (early: one more per Linear call, tying its weight's
    gradient to its input's), the Linear calls of one forward, and the (shape, dtype) of every all-reduce in the
    early step against the shapes of the weights the model computes with in bf16."""
    found = {}
    for mode in ("xla", "early"):
        cfg = load_config("mamba1-tiny", [*QUIET, *ONE_LAYER, "--model.compute_dtype=bfloat16", "--mesh.data=4",
                                          f"--mesh.grad_reduce={mode}"])  # fmt: skip
        text, found["kernels"] = partitioned_step(cfg)
        found[mode] = {"barriers": text.count(" opt-barrier("), "all_reduces": collective_types(text, "all-reduce")}
    found["linear_calls"] = 4 * cfg.model.n_layer  # in_proj (split), x_proj, dt_proj, out_proj
    return found


def ssd_forward_kernels(context: int) -> int:
    """The Pallas SSD forward kernels in Mamba-2's train step (one layer) with each sequence over ``context``
    devices, counted in its jaxpr: a context-parallel step runs the scan once, as one device's does (each stretch's
    final state comes from ``ssd_final_state``, not from a second scan)."""
    model, extra = MODELS["mamba2-pallas"]
    cfg = load_config(model, [*QUIET, *extra, "--mesh.data=1", f"--mesh.context={context}"])
    with mesh_training(cfg) as (_, _, setup, batches):
        args = (setup.params, setup.opt_state, setup.state, batches(0), np.int32(0))
        program = str(jax.make_jaxpr(setup.train_step)(*args))
    return len(re.findall(r"name=ssd_fwd\w*", program))


def main(out: str) -> None:
    interpreter_callbacks.dispatch_inline()  # as in tests/conftest.py: before the CPU client starts
    interpreter_callbacks.install()  # the interpreted kernels' cheaper callbacks, as in tests/conftest.py
    assert jax.device_count() == 8, jax.devices()
    results = {
        "sharded-init": sharded_init(),
        "data-parallel-collectives": data_parallel_collectives(),
        "gathered-in-bf16": gathered_in_bf16(),
        "ssd-forward-kernels": {str(n): ssd_forward_kernels(n) for n in (1, 2)},
        "early-grad-reduce": early_grad_reduce(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, data, fsdp, context) in MESHES.items():  # no checkpoint: only the resume reads one
            results[name] = run(model, data, fsdp, context, Path(tmp) / name, ["--save_checkpoints=false"])
        # Resume on another device count: 1 step on 8 devices (2x4x1: parameters split over 4), then the other 2 on 4
        # (1x1x4: parameters whole, positions split), against "mamba2-1x1x1". The same settings as the 2x4x1 and
        # 1x1x4 runs (stopping, resuming and saving change no compiled program), so both parts load their steps from
        # the test session's compilation cache; 2 steps after the restore make the restored AdamW state show in the
        # last loss.
        folder = Path(tmp) / "resumed"
        run("mamba2", 2, 4, 1, folder, ["--stop_after_steps=1"])
        results["resumed-2x4x1-then-1x1x4"] = run("mamba2", 1, 1, 4, folder, resume=True)
        results["resumed-steps"] = sorted(int(p.name) for p in (folder / CHECKPOINT_DIR).iterdir() if p.name.isdigit())
    Path(out).write_text(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
