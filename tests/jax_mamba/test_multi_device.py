"""Training on a mesh of 8 host CPU devices (a process of its own: ``multi_device_runs``): data parallel and FSDP
meshes of 1 to 8 devices give the same per-step losses for Mamba-1, Mamba-2 (its loss over chunks too) and the hybrid,
the Pallas kernels (interpreted) run per device under shard_map, FSDP left to XLA's partitioner
(`mesh.fsdp_gather=xla`) trains the same, FSDP with parameters gathered whole (the default) gathers the matmul
weights in bf16, a data-parallel step gathers nothing and reduces nothing inside its loss loop, gradients reduced
"early" (per device, explicitly) train the same with each weight gradient tied to its layer's backward, FSDP's
initial state is made split, and a run saved on 8 devices resumes on 4 as if never stopped. Mesh arguments are
checked before anything runs."""

import json
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jax_mamba.configs.schema import MeshConfig
from jax_mamba.train.sharding import MeshError, check_batch, make_mesh, param_sharding


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("mesh") / "runs.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.jax_mamba.multi_device_runs", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def curve(run: dict, key: str = "losses") -> np.ndarray:
    return np.asarray([run[key][k] for k in sorted(run[key], key=int)])


@pytest.mark.parametrize("model", ["mamba1", "mamba2", "hybrid", "mamba2-pallas", "mamba2-chunked"])
def test_every_mesh_trains_like_one_device(runs, model):
    """Data parallel, FSDP and (Mamba-2) context parallel meshes: the same per-step losses, gradient norms (which
    AdamW's scale invariance would hide from the losses) and evaluation."""
    one = curve(runs[f"{model}-1x1x1"])
    pallas = model.endswith("pallas")
    # this model's runs, FSDP left to XLA and gradients reduced early too
    mesh_run = re.compile(rf"{re.escape(model)}-(xla-|early-)?\d+x\d+x\d+")
    others = [n for n in runs if mesh_run.fullmatch(n) and n != f"{model}-1x1x1"]
    assert others and len(one) == 3 and one[-1] < one[0]
    for name in others:
        np.testing.assert_allclose(curve(runs[name]), one, rtol=2e-6, err_msg=name)
        norms = curve(runs[f"{model}-1x1x1"], "grad_norms")
        np.testing.assert_allclose(curve(runs[name], "grad_norms"), norms, rtol=2e-5, err_msg=name)
        np.testing.assert_allclose(runs[name]["eval"], runs[f"{model}-1x1x1"]["eval"], rtol=2e-6, err_msg=name)
        if not pallas:  # the interpreted Pallas step is sometimes traced twice on the CPU, mesh or not
            assert runs[name]["traces"] == 1, name


def test_data_parallel_step_gathers_nothing_and_reduces_once(runs):
    """With the loss over chunks, each device computes the LM head of its own rows only: no all-gather at all, and
    no collective inside the chunk loop (the head's weight gradient is reduced once, after it)."""
    collectives = runs["data-parallel-collectives"]
    assert collectives == {"all_gathers": 0, "in_loops": 0}


def test_early_grad_reduce_ties_each_weight_gradient_and_reduces_bf16_weights_in_bf16(runs):
    """``mesh.grad_reduce="early"``: one more optimization barrier per Linear call than XLA's own reduction (each
    weight's gradient tied to its input's), and the matmul weights' gradients summed over the devices in bf16, the
    compute dtype (as XLA's reduction does), the other parameters' in float32. The same trainings as one device's
    are in ``test_every_mesh_trains_like_one_device``."""
    found = runs["early-grad-reduce"]
    assert found["early"]["barriers"] - found["xla"]["barriers"] == found["linear_calls"] > 0
    reduced = {tuple(pair) for pair in found["early"]["all_reduces"]}
    assert {(shape, "bf16") for shape in found["kernels"]} <= reduced
    assert {dtype for shape, dtype in reduced if shape not in found["kernels"]} == {"f32"}


def test_context_parallel_step_runs_the_scan_once(runs):
    """Each stretch's final state is a contraction (``ssd_final_state``), not a second scan: as many SSD forward
    kernels as on one device (the scan's own, and its recomputation under the layer's remat)."""
    kernels = runs["ssd-forward-kernels"]
    assert kernels["1"] > 0 and kernels["2"] == kernels["1"]


def test_gathered_fsdp_moves_the_matmul_weights_in_bf16(runs):
    """With bf16 compute, the whole-parameter gathers take the matmul weights already cast (half the bytes of their
    float32 values); the other parameters are gathered as stored."""
    gathered = runs["gathered-in-bf16"]
    gathers = {tuple(pair) for pair in gathered["gathers"]}
    assert gathered["kernels"] and {(shape, "bf16") for shape in gathered["kernels"]} <= gathers
    assert not {(shape, "f32") for shape in gathered["kernels"]} & gathers
    assert {dtype for _, dtype in gathers} == {"bf16", "f32"}


def test_fsdp_initialization_is_sharded_and_the_same(runs):
    """Parameters and optimizer state are made already split over the mesh (no device holds the whole model, as
    eager initialization under a mesh did) and equal the one-device initialization."""
    init = runs["sharded-init"]
    assert init["max_diff"] == 0.0
    assert init["misplaced"] == 0
    assert init["split_arrays"] >= 10 and init["largest_share"] == 1 / 8


def test_initialization_never_builds_the_model_eagerly():
    """Every ``build_model`` call of ``init_training`` runs under tracing (shapes, or the jit-compiled function with
    the mesh's output shardings): an eager build would first make the whole model on every device of the mesh."""
    import jax.numpy as jnp

    from jax_mamba.configs.loader import load_config
    from jax_mamba.tasks import task_for
    from jax_mamba.train.step import init_training

    cfg = load_config("mamba2-tiny", [])
    task = task_for(cfg)
    traced = []
    build = task.build_model

    def recording_build(rngs):
        traced.append(isinstance(jnp.zeros(()), jax.core.Tracer))
        return build(rngs)

    task.build_model = recording_build
    setup = init_training(cfg, task)
    assert traced and all(traced), traced
    assert setup.params and all(isinstance(v, jax.Array) for v in setup.params.values())


def test_resume_on_another_device_count(runs):
    """Saved after step 1 on 8 devices, resumed on 4 for steps 2 and 3: the losses of the uninterrupted one-device
    run (step 3's shows the restored optimizer state)."""
    assert runs["resumed-steps"] == [1, 3]
    np.testing.assert_allclose(curve(runs["resumed-2x4x1-then-1x1x4"]), curve(runs["mamba2-1x1x1"]), rtol=2e-6)


def test_context_parallelism_refusals():
    from jax_mamba.configs.loader import ConfigError, load_config

    with pytest.raises(ConfigError, match="Mamba-2 language model without attention"):
        load_config("hybrid-tiny", ["--mesh.context=2"])
    with pytest.raises(ConfigError, match="Mamba-2 language model without attention"):
        load_config("mamba1-tiny", ["--mesh.context=2"])
    with pytest.raises(ConfigError, match=r"a multiple of mesh\.context=3"):
        load_config("mamba2-tiny", ["--mesh.context=3"])


def test_grad_reduce_refusals():
    from jax_mamba.configs.loader import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"mesh\.grad_reduce: expected one of \('xla', 'early'\), got 'late'"):
        load_config("mamba1-tiny", ["--mesh.grad_reduce=late"])
    for mesh in ("--mesh.fsdp=2", "--mesh.context=2"):
        with pytest.raises(ConfigError, match=r"mesh\.grad_reduce: expected 'xla' unless mesh\.fsdp and mesh\.context"):
            load_config("mamba2-tiny", [mesh, "--mesh.grad_reduce=early"])
    assert load_config("mamba2-tiny", ["--mesh.grad_reduce=early"]).mesh.grad_reduce == "early"


def test_mesh_arguments():
    cpu = jax.devices()[:1] * 8  # eight entries are enough to lay out a mesh
    assert make_mesh(MeshConfig(data=0, fsdp=4), cpu).shape == {"data": 2, "fsdp": 4, "context": 1}
    assert make_mesh(MeshConfig(data=2, fsdp=1), cpu).shape == {"data": 2, "fsdp": 1, "context": 1}  # fewer
    assert make_mesh(MeshConfig(fsdp=2, context=2), cpu).shape == {"data": 2, "fsdp": 2, "context": 2}
    with pytest.raises(MeshError, match=r"mesh\.fsdp=3 x mesh\.context=1 must divide the 8 devices"):
        make_mesh(MeshConfig(fsdp=3), cpu)
    with pytest.raises(MeshError, match="needs more than the 8 devices"):
        make_mesh(MeshConfig(data=4, fsdp=4), cpu)
    mesh = make_mesh(MeshConfig(data=2, fsdp=4), cpu)
    with pytest.raises(MeshError, match=r"train\.batch_size=12 must be a multiple of data x fsdp = 8"):
        check_batch(mesh, 12)
    assert param_sharding(mesh, (64, 6, 12)).spec == P("fsdp", None, None)  # the largest axis fsdp divides
    assert param_sharding(mesh, (6, 12)).spec == P(None, "fsdp")
    assert param_sharding(mesh, (7, 3)).spec == P(None, None)  # none divides: replicated
    assert param_sharding(mesh, ()).spec == P()
