"""The PyTorch reference's training (or inference) throughput: ``python -m torch_reference.train_bench --config NAME``.

The PyTorch side of ``compare.throughput``, for any family, at the reference's best settings: the model from
the same config (fp32 params: mamba-ssm's ``MambaLMHeadModel`` with its fused kernels, NVlabs' ``MambaVision``
in channels-last memory format, or Graph-Mamba on torch_geometric and mamba-ssm's ``Mamba``), bf16 autocast, the
task's loss on fp32 logits (cross-entropy with label smoothing as configured; Graph-Mamba's multilabel BCE and
regression L1), global-norm clipping, fused ``torch.optim.AdamW`` with the same betas, eps, weight-decay groups
(which parameters decay: ``Task.weight_decay_mask``) and learning-rate schedule as ours (warmup, then cosine to
min_lr over the run's ``--steps``: ``optim.learning_rate_schedule``), on the same batches as the JAX run (graph
batches unpadded to PyG tensors on the device before the clock starts; padded to our buckets under ``--mode
cuda_graph``). ``--inference``: eval-mode forwards under ``torch.inference_mode`` instead. Prints one JSON line: mean
items/s (tokens, images or graphs) over the steps after ``--warmup`` (3, at most steps - 1: the first ones autotune
and allocate), less any step that captured a CUDA graph for a new batch shape, each from a batch already on the
device to the loss read back, and peak allocated CUDA memory. ``--mode``: how the step executes
(``torch_reference.step_modes``: eager, CUDA graphs, torch.compile with or without CUDA graphs). ``--parallel
ddp|fsdp`` under ``torchrun``: DDP or FSDP2 over its processes (``torch_reference.distributed``), each on its rows of
the same global batch (``--batch_size``); the first process reports the global tokens/s (the slowest process's time)
and the largest peak."""

import argparse
import gc
import json
import os
import sys
import time

# JAX only reads configs and makes batches here: it stays off the GPUs, which are torch's. (Under torchrun, every
# process's NCCL communicator once landed on GPU 0, "Duplicate GPU detected"; this and binding NCCL to the process's
# GPU in ``distributed.start`` fixed it together.)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np
import torch
import torch.nn.functional as F

from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.configs.schema import RunConfig
from jax_mamba.tasks import task_for
from jax_mamba.train.optim import learning_rate_schedule
from torch_reference import distributed
from torch_reference.backend import Reference, load
from torch_reference.distributed import PARALLEL_MODES, SINGLE, Process
from torch_reference.step_modes import MODES, check_mode, compiled, step_function
from torch_reference.trace_passes import PASS_RANGE


class _Runner:
    """One family's model, optimizer and batch handling; ``train_step`` returns the loss tensor."""

    unit: str
    model: torch.nn.Module
    sync_passes = False  # synchronize the GPU at the end of each pass (while profiled: see trace_passes)

    def __init__(
        self, ref: Reference, cfg: RunConfig, mode: str = "eager", parallel: str = "none", process: Process = SINGLE
    ):
        check_mode(mode, ref.device, parallel)
        self.ref, self.cfg, self.device, self.mode = ref, cfg, ref.device, mode
        self.parallel, self.process = parallel, process
        self.build()
        ours = {name: np.zeros(p.shape, np.float32) for name, p in self.model.named_parameters()}
        decayed = self.decayed(ours)
        self.module = self.model  # the model itself (FSDP2 shards it in place, keeping its parameter names)
        self.model = distributed.wrap(self.model, parallel, process)
        groups = [
            {
                "params": [p for n, p in self.module.named_parameters() if decayed[n]],
                "weight_decay": cfg.optim.weight_decay,
            },
            {"params": [p for n, p in self.module.named_parameters() if not decayed[n]], "weight_decay": 0.0},
        ]
        o = cfg.optim
        captured = mode == "cuda_graph"  # the rate then lives on the device, where the schedule fills it in place
        lr = torch.tensor(o.lr, device=self.device) if captured else o.lr
        self.optimizer = torch.optim.AdamW(
            groups, lr=lr, betas=(o.beta1, o.beta2), eps=o.eps, fused=self.device == "cuda", capturable=captured
        )
        # our schedule over train.max_steps (warmup, then cosine to min_lr), as factors of lr for LambdaLR
        steps = cfg.train.max_steps
        factors = np.asarray(learning_rate_schedule(o, steps)(np.arange(steps)), np.float64) / o.lr
        rate = lambda step: float(factors[min(step, steps - 1)])  # noqa: E731
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, rate)
        self.forward = compiled(self.model, mode)
        dtype = cfg.model.compute_dtype  # bf16 autocast where our side computes in bf16 ("auto": on a GPU)
        self.autocast = dtype == "bfloat16" or (dtype == "auto" and self.device == "cuda")
        self.autocast_cache = not captured  # a capture must not keep autocast's casts of the weights from warm-up

    def settings(self) -> str:
        """The reference's settings, for reports."""
        return ", ".join(
            ["bf16 autocast" if self.autocast else "float32", "fused AdamW" if self.device == "cuda" else "AdamW"]
            + (["channels_last"] if self.cfg.family == "mamba_vision" else [])
            + [MODES[self.mode]]
            + ([_PARALLEL_NAMES[self.parallel]] if self.parallel != "none" else [])
        )

    def build(self) -> None: ...

    def decayed(self, params_by_torch_name: dict) -> dict[str, bool]: ...

    def our_state_dict(self, params: dict, state: dict) -> dict: ...

    tied = ()  # state-dict keys the reference model holds twice (loaded through their twin)

    def load_ours(self, params: dict, state: dict) -> None:
        """Our model's variables (flat numpy dicts, as ``train.step.initial_variables`` gives them) into the
        reference model, strictly: every key the reference model has but ``tied`` must be given, none may be left."""
        values = {k: torch.from_numpy(np.array(v)) for k, v in self.our_state_dict(params, state).items()}
        missing, unexpected = self.module.load_state_dict(values, strict=False)
        if [k for k in missing if k not in self.tied] or unexpected:
            raise RuntimeError(
                f"our variables do not fit the reference model: missing {missing}, unexpected {unexpected}"
            )

    def inputs(self, batch: dict): ...

    def logits_and_labels(self, inputs) -> tuple[torch.Tensor, torch.Tensor]: ...

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The training objective on float32 logits: cross-entropy with the configured label smoothing."""
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), label_smoothing=self.cfg.train.label_smoothing
        )

    def backward(self, inputs) -> torch.Tensor:
        """The forward and backward passes (profiler ranges ``PASS_RANGE`` + forward, backward): gradients
        accumulate into the parameters' ``.grad``; returns the loss."""
        with torch.profiler.record_function(PASS_RANGE + "forward"):
            with torch.autocast(
                self.device, dtype=torch.bfloat16, enabled=self.autocast, cache_enabled=self.autocast_cache
            ):
                logits, labels = self.logits_and_labels(inputs)
            loss = self.loss(logits.float(), labels)
            self._end_pass()
        with torch.profiler.record_function(PASS_RANGE + "backward"):
            loss.backward()
            self._end_pass()
        return loss

    def update(self) -> None:
        """Global-norm clipping and the AdamW step (no host synchronization: a CUDA graph can hold it)."""
        if self.cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.grad_clip)
        self.optimizer.step()

    def train_step(self, inputs) -> torch.Tensor:
        """One optimizer step (``backward``, then the optimizer's pass, a profiler range too)."""
        loss = self.backward(inputs)
        with torch.profiler.record_function(PASS_RANGE + "optimizer"):
            self.update()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self._end_pass()
        return loss

    def _end_pass(self) -> None:
        if self.sync_passes and self.device == "cuda":
            torch.cuda.synchronize()

    def infer_step(self, inputs) -> torch.Tensor:
        with (
            torch.inference_mode(),
            torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.autocast, cache_enabled=self.autocast_cache),
        ):
            logits, _ = self.logits_and_labels(inputs)
        return logits


class _LanguageModel(_Runner):
    unit = "tokens"

    def build(self) -> None:
        from torch_reference.lm import TorchLM

        self.model = TorchLM(self.ref, self.cfg.model, seed=self.cfg.train.seed).model

    def decayed(self, params_by_torch_name: dict) -> dict[str, bool]:
        from jax_mamba.checkpoints.convert import from_torch_state_dict, torch_name

        ours = from_torch_state_dict(params_by_torch_name, self.cfg.model)
        mask = {torch_name(k): v for k, v in task_for(self.cfg).weight_decay_mask(ours).items()}
        return {name: mask[name] for name in params_by_torch_name}

    tied = ("lm_head.weight",)

    def our_state_dict(self, params: dict, state: dict) -> dict:
        from jax_mamba.checkpoints.convert import to_torch_state_dict

        return to_torch_state_dict(params, self.cfg.model)

    def inputs(self, batch: dict):
        to = lambda a: torch.from_numpy(a[0]).long().to(self.device)  # noqa: E731
        return to(batch["inputs"]), to(batch["targets"])

    def logits_and_labels(self, inputs):
        ids, labels = inputs
        return self.forward(ids).logits, labels


class _MambaVision(_Runner):
    unit = "images"

    def build(self) -> None:
        from torch_reference.mamba_vision import TorchMambaVision

        model = TorchMambaVision(self.ref, self.cfg.model, seed=self.cfg.train.seed).model
        self.model = model.to(memory_format=torch.channels_last)
        data = self.cfg.data
        self.mean = torch.tensor(data.mean, device=self.device).view(1, 3, 1, 1) * 255
        self.inv_std = 1 / (torch.tensor(data.std, device=self.device).view(1, 3, 1, 1) * 255)

    def decayed(self, params_by_torch_name: dict) -> dict[str, bool]:
        return {name: value.ndim >= 2 for name, value in params_by_torch_name.items()}  # timm's rule, as ours

    def our_state_dict(self, params: dict, state: dict) -> dict:
        from jax_mamba.checkpoints.convert_mamba_vision import to_torch_state_dict

        return to_torch_state_dict({**params, **state}, self.cfg.model)

    def inputs(self, batch: dict):
        images = torch.from_numpy(batch["images"][0]).to(self.device)
        return images, torch.from_numpy(batch["labels"][0]).long().to(self.device)

    def logits_and_labels(self, inputs):
        """uint8 (batch, H, W, 3) images normalized on the device (inside the timed step, as ours are)."""
        images, labels = inputs
        x = (images.permute(0, 3, 1, 2).float() - self.mean) * self.inv_std
        return self.forward(x.contiguous(memory_format=torch.channels_last)), labels


class _GraphMamba(_Runner):
    """Unpadded PyG-style batches; in mode ``cuda_graph`` our padded ones at the bucket's fixed shapes (the same
    padded work as our side: ``graph_mamba_layers``), passed as a tuple of tensors so that a graph is captured per
    bucket shape."""

    unit = "graphs"

    def build(self) -> None:
        from torch_reference.graph_mamba import TorchGraphMamba

        self.model = TorchGraphMamba(self.ref, self.cfg.model, seed=self.cfg.train.seed).model
        self.padded = self.mode == "cuda_graph"
        self.fields: list[str] = []  # the GraphInputs fields a padded batch's tuple holds, in order

    def settings(self) -> str:
        return super().settings() + (", padded to our buckets" if self.padded else "")

    def decayed(self, params_by_torch_name: dict) -> dict[str, bool]:
        """The task's rule (GraphGPS's AdamW decays every parameter), read through the conversion table."""
        from jax_mamba.checkpoints.convert_graph_mamba import expected_variables, split_variables, torch_name

        shapes = expected_variables(self.cfg.model)
        ours, _ = split_variables({k: np.zeros(v, np.float32) for k, v in shapes.items()}, self.cfg.model)
        mask = {torch_name(k): v for k, v in task_for(self.cfg).weight_decay_mask(ours).items()}
        return {name: mask[name] for name in params_by_torch_name}

    def our_state_dict(self, params: dict, state: dict) -> dict:
        from jax_mamba.checkpoints.convert_graph_mamba import to_torch_state_dict

        return to_torch_state_dict({**params, **state}, self.cfg.model)

    def inputs(self, batch: dict):
        """The padded batch -> unpadded PyG-style tensors on the device (the model draws its own orderings); in
        padded mode, every row as a tuple of tensors (``fields`` names them)."""
        from torch_reference.graph_mamba import graph_inputs, padded_graph_inputs

        rows = {k: v[0] for k, v in batch.items()}
        if not self.padded:
            g = graph_inputs(rows, self.device)
            return g, g.labels
        g = padded_graph_inputs(rows, self.device)
        tensors = {k: v for k, v in vars(g).items() if isinstance(v, torch.Tensor)}
        self.fields = list(tensors)
        return tuple(tensors.values())

    def logits_and_labels(self, inputs):
        from torch_reference.graph_mamba_layers import GraphInputs

        if not self.padded:
            g, labels = inputs
            return self.forward(g), labels
        fields = dict(zip(self.fields, inputs, strict=True))
        defaults = {"edge_attr": None, "eigvecs": None, "eigvals": None}
        g = GraphInputs(**{**defaults, **fields, "num_graphs": fields["slots"].shape[0]})
        rows = g.node_mask if self.cfg.model.task_level == "node" else g.graph_mask
        return self.forward(g), (g.labels, rows)

    def loss(self, logits: torch.Tensor, labels) -> torch.Tensor:
        from torch_reference.graph_mamba import graph_loss

        labels, rows = labels if self.padded else (labels, None)
        m = self.cfg.model
        return graph_loss(logits, labels, m.task_type, self.cfg.train.label_smoothing, m.class_weighted_loss, rows)


_RUNNERS = {"lm": _LanguageModel, "mamba_vision": _MambaVision, "graph_mamba": _GraphMamba}


_PARALLEL_NAMES = {
    "ddp": "DDP, one process per device",
    "fsdp": "FSDP2 (fully_shard per block), one process per device",
}


def make_runner(
    ref: Reference, cfg: RunConfig, mode: str = "eager", parallel: str = "none", process: Process = SINGLE
) -> _Runner:
    """The family's model, fused AdamW and batch handling, at the reference's best settings, built for execution
    ``mode`` (``torch_reference.step_modes``); with ``parallel``, the model under DDP or FSDP2 in a process group
    (``torch_reference.distributed``)."""
    if ref.device == "cuda":
        torch.backends.cudnn.benchmark = True
    return _RUNNERS[cfg.family](ref, cfg, mode, parallel, process)


def measure(
    config: str,
    steps: int,
    batch_size: int,
    seq_len: int,
    overrides: list[str],
    device: str = "cuda",
    inference: bool = False,
    mode: str = "eager",
    warmup: int = 3,
    parallel: str = "none",
) -> dict:
    """Throughput of ``steps`` steps (``warmup`` left out) in execution ``mode``. ``batch_size`` is the global batch:
    with ``parallel`` each process of the group trains on its share of every batch's rows, and the step time is the
    slowest's."""
    sizes = [f"--batch_size={batch_size}", f"--seq_len={seq_len}", f"--max_steps={steps}", "--eval_batches=1"]
    cfg = load_config(config, [*sizes, *overrides])  # max_steps: the schedule spans the run, as our side's does
    check_mode(mode, device, parallel)
    process = distributed.start(device, parallel)
    ref = load(device)
    runner = make_runner(ref, cfg, mode, parallel, process)
    runner.model.train(not inference)
    step_fn = step_function(runner, mode, inference)
    dataset = task_for(cfg).make_dataset()
    timed, losses = [], []
    warmup = min(warmup, steps - 1)  # at least one timed step
    captures = lambda: len(getattr(step_fn, "graphs", ()))  # noqa: E731  (CUDA graphs captured so far)
    for step in range(steps):
        batch = {k: distributed.my_rows(v, process, axis=1) for k, v in dataset.train_batch(step, 1).items()}
        inputs = runner.inputs(batch)
        if device == "cuda":
            torch.cuda.synchronize()
        captured, began = captures(), time.perf_counter()
        if inference:
            step_fn(inputs).float().sum().item()  # synchronizes
        else:
            losses.append(step_fn(inputs).item())  # synchronizes, as the JAX loop does
        if step >= warmup and captures() == captured:  # a step that captured a new batch shape is not timed
            timed.append(time.perf_counter() - began)
    if not timed:
        raise RuntimeError(f"every step after the warm-up captured a new batch shape: run more than {steps} steps")
    items = batch_size * (seq_len if cfg.family == "lm" else 1)
    seconds = distributed.all_max(sum(timed), process)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    peak = None if peak is None else distributed.all_max(peak, process)
    final = distributed.all_mean(losses[-1], process) if losses else None
    result = {
        "config": config,
        "framework": "torch",
        "mode": "inference" if inference else "training",
        "execution": mode,
        "reference": ref.describe(),
        "settings": runner.settings(),
        "unit": runner.unit,
        "items_per_s": items * len(timed) / seconds,
        "peak_memory_gib": peak,  # the largest over the processes
        "final_loss": final,
        "parameters": sum(p.numel() for p in runner.module.parameters()),
        "processes": process.world,
        "timed_steps": len(timed),
        "cuda_graphs": captures(),
    }
    # DDP's reducer holds the process group: let it go before the group does, not at interpreter exit (a gloo rank
    # once aborted there in CI, "terminate called without an active exception")
    del runner
    gc.collect()
    distributed.finish(process)
    return result if process.leader else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_reference.train_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=2048)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: the reference's CPU fallback")
    parser.add_argument("--inference", action="store_true", help="time eval-mode forwards instead of training steps")
    parser.add_argument(
        "--mode",
        default="eager",
        choices=list(MODES),
        help="execution: eager, the whole step as one CUDA graph, torch.compile, or torch.compile reduce-overhead",
    )
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of the mean (at most steps - 1)")
    parser.add_argument(
        "--parallel", default="none", choices=PARALLEL_MODES, help="under torchrun: DDP or FSDP2 over its processes"
    )
    args, overrides = parse_args_with_overrides(parser, argv)
    result = measure(
        args.config,
        args.steps,
        args.batch_size,
        args.seq_len,
        overrides,
        args.device,
        args.inference,
        args.mode,
        args.warmup,
        args.parallel,
    )
    if result:  # the first process reports
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
