"""The reference's execution modes (torch_reference.step_modes): which mode the runner is built for, refusals before
any work where a mode cannot run, and (GPU) one step captured in a CUDA graph that trains, follows our schedule and
refuses a batch of another shape."""

import numpy as np
import pytest

pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mode", "cuda_graph"], "mode 'cuda_graph' replays CUDA graphs: it needs device 'cuda', got 'cpu'"),
        (["--mode", "compile_cuda_graph"], "mode 'compile_cuda_graph' replays CUDA graphs: it needs device 'cuda'"),
    ],
)
def test_graph_modes_are_refused_without_a_gpu(cpu_reference, argv, message):
    from torch_reference.train_bench import main

    with pytest.raises(ValueError, match=message):
        main(["--config", "mamba2-tiny", "--steps", "2", "--device", "cpu", *argv])


def test_check_mode_names_the_argument():
    from torch_reference.step_modes import check_mode

    with pytest.raises(ValueError, match=r"mode must be one of \['eager', 'cuda_graph'"):
        check_mode("graphs", "cuda")
    with pytest.raises(ValueError, match="parallel must be 'none', got 'ddp'"):
        check_mode("cuda_graph", "cuda", "ddp")
    check_mode("compile", "cpu")  # torch.compile runs anywhere


@pytest.mark.parametrize(("mode", "wrapped"), [("eager", False), ("compile", True)])
def test_runner_is_built_for_its_mode(cpu_reference, mode, wrapped):
    import torch

    from jax_mamba.configs.loader import load_config
    from torch_reference.step_modes import MODES
    from torch_reference.train_bench import make_runner

    runner = make_runner(cpu_reference, load_config("mamba2-tiny", ["--batch_size=2", "--seq_len=16"]), mode)
    assert isinstance(runner.forward, torch._dynamo.eval_frame.OptimizedModule) == wrapped
    assert runner.settings().endswith(MODES[mode]) and runner.autocast_cache
    assert not isinstance(runner.optimizer.param_groups[0]["lr"], torch.Tensor)  # a float unless captured


def test_captured_step_refuses_batches_that_are_not_tuples_of_tensors(cpu_reference):
    from jax_mamba.configs.loader import load_config
    from jax_mamba.tasks import task_for
    from torch_reference.step_modes import CapturedStep
    from torch_reference.train_bench import make_runner

    cfg = load_config("graph-mamba-tiny", ["--data.num_graphs=8", "--batch_size=2"])
    runner = make_runner(cpu_reference, cfg)
    inputs = runner.inputs(task_for(cfg).make_dataset().train_batch(0, 1))
    kind = type(inputs[0]).__name__
    with pytest.raises(ValueError, match=f"needs batches as a tuple of tensors; got one holding {kind}"):
        CapturedStep(runner)(inputs)


def test_warmup_before_a_capture_leaves_no_trace(cpu_reference):
    """What the capture's warm-up steps change (weights, BatchNorm statistics, the optimizer state they create) is
    put back in place: the captured run starts where an eager one does."""
    import torch

    from jax_mamba.configs.loader import load_config
    from jax_mamba.tasks import task_for
    from torch_reference.step_modes import _restore, _snapshot, _training_state
    from torch_reference.train_bench import make_runner

    cfg = load_config("mambavision-tiny", ["--batch_size=2"])
    runner = make_runner(cpu_reference, cfg)
    before = {k: t.detach().clone() for k, t in _training_state(runner).items()}
    addresses = {k: t.data_ptr() for k, t in _training_state(runner).items()}
    saved = _snapshot(runner)
    runner.train_step(runner.inputs(task_for(cfg).make_dataset().train_batch(0, 1)))
    after = _training_state(runner)
    assert any(k[0] == "optimizer" for k in after) and any("running_mean" in k[1] for k in before if k[0] == "model")
    assert any(not torch.equal(after[k], before[k]) for k in before)  # the step changed something to undo
    _restore(runner, saved)
    restored = _training_state(runner)
    for key, t in restored.items():
        if key in before:
            torch.testing.assert_close(t, before[key], rtol=0, atol=0)
            assert t.data_ptr() == addresses[key]
        else:
            assert not t.any(), key  # optimizer state as AdamW's first step finds it


def test_graph_mamba_runner_passes_padded_batches_as_tensors(cpu_reference):
    """Built for CUDA graphs (padded here by hand, as mode cuda_graph does on a GPU), the Graph-Mamba runner gives
    every row of our bucket as a tuple of tensors and computes the task's loss over the real rows from it."""
    import torch

    from jax_mamba.configs.loader import load_config
    from jax_mamba.tasks import task_for
    from torch_reference.train_bench import make_runner

    cfg = load_config("graph-mamba-tiny", ["--data.num_graphs=8", "--batch_size=3"])
    runner = make_runner(cpu_reference, cfg)
    runner.padded = True
    batch = task_for(cfg).make_dataset().train_batch(0, 1)
    inputs = runner.inputs(batch)
    assert all(isinstance(t, torch.Tensor) for t in inputs) and "slots" in runner.fields
    assert inputs[runner.fields.index("x")].shape[0] == batch["node_mask"].shape[1]  # padding rows too
    loss = runner.backward(inputs)
    assert torch.isfinite(loss) and "padded to our buckets" in runner.settings()
    grads = [p.grad for p in runner.module.parameters() if p.grad is not None]
    assert runner.module.layers[0].self_attn.in_proj.weight.grad is not None  # through the slot table
    assert len(grads) > 20 and all(torch.isfinite(g).all() for g in grads)


GRAPHED_CONFIGS = ["mamba2-tiny", "mamba1-tiny", "hybrid-tiny", "mambavision-tiny"]


@pytest.mark.gpu
@pytest.mark.parametrize("config", GRAPHED_CONFIGS)
def test_captured_step_trains_and_follows_the_schedule(cuda_reference, config):
    """A family's whole step in one CUDA graph: finite losses that fall, the device-tensor learning rate our
    schedule's at every replay, the same losses as eager steps from the same weights on the same batches (the
    capture's warm-up steps leave no trace); a batch of other shapes gets a graph of its own."""
    import torch

    from jax_mamba.configs.loader import load_config
    from jax_mamba.tasks import task_for
    from jax_mamba.train.optim import learning_rate_schedule
    from torch_reference.step_modes import CapturedStep
    from torch_reference.train_bench import make_runner

    overrides = ["--batch_size=4", "--seq_len=64", "--max_steps=12", "--warmup_steps=2", "--lr=3e-3"]
    if config == "mambavision-tiny":  # stochastic depth draws other random numbers in a graph than eagerly
        overrides.append("--model.drop_path_rate=0")
    cfg = load_config(config, overrides)
    captured_runner = make_runner(cuda_reference, cfg, "cuda_graph")
    eager_runner = make_runner(cuda_reference, cfg)
    step = CapturedStep(captured_runner)
    dataset = task_for(cfg).make_dataset()
    schedule = np.asarray(learning_rate_schedule(cfg.optim, 12)(np.arange(12)))
    captured, eager, rates = [], [], []
    for k in range(12):
        rates.append(float(captured_runner.optimizer.param_groups[0]["lr"]))
        batch = dataset.train_batch(k, 1)
        captured.append(step(captured_runner.inputs(batch)).item())
        eager.append(eager_runner.train_step(eager_runner.inputs(batch)).item())
    assert np.all(np.isfinite(captured)) and np.mean(captured[-3:]) < captured[0]
    np.testing.assert_allclose(rates, schedule, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(captured, eager, rtol=2e-2)  # bf16 autocast; the graph runs the same kernels
    other = dataset.train_batch(0, 1)
    other = {k: v[:, :2] for k, v in other.items()}  # two rows, not four: a second graph, in the same pool
    assert np.isfinite(step(captured_runner.inputs(other)).item()) and len(step.graphs) == 2
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["mamba1-tiny", "mambavision-tiny"])
def test_captured_inference_gives_the_eager_logits(cuda_reference, config):
    """The eval-mode forward captured once and replayed on new batches: the eager forward's logits each time."""
    import torch

    from jax_mamba.configs.loader import load_config
    from jax_mamba.tasks import task_for
    from torch_reference.step_modes import CapturedStep
    from torch_reference.train_bench import make_runner

    cfg = load_config(config, ["--batch_size=4", "--seq_len=64"])
    runner = make_runner(cuda_reference, cfg, "cuda_graph")
    runner.model.eval()
    step = CapturedStep(runner, inference=True)
    dataset = task_for(cfg).make_dataset()
    for k in range(3):
        inputs = runner.inputs(dataset.train_batch(k, 1))
        replayed = step(inputs).float().clone()
        eager = runner.infer_step(inputs).float()
        assert torch.isfinite(replayed).all()
        torch.testing.assert_close(replayed, eager, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_graph_mamba_captures_a_graph_per_bucket_and_trains(cuda_reference):
    """Graph-Mamba under mode cuda_graph: padded batches, a graph per bucket shape, finite losses that fall."""
    from jax_mamba.configs.loader import load_config
    from jax_mamba.tasks import task_for
    from torch_reference.step_modes import CapturedStep
    from torch_reference.train_bench import make_runner

    cfg = load_config("graph-mamba-tiny", ["--data.num_graphs=64", "--batch_size=8", "--max_steps=16"])
    runner = make_runner(cuda_reference, cfg, "cuda_graph")
    step = CapturedStep(runner)
    dataset = task_for(cfg).make_dataset()
    losses = [step(runner.inputs(dataset.train_batch(k, 1))).item() for k in range(16)]
    assert np.all(np.isfinite(losses)) and np.mean(losses[-4:]) < np.mean(losses[:4])
    assert 1 <= len(step.graphs) <= 4
