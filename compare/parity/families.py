"""Each family's PyTorch side for the parity driver (``compare.parity``): its reference model (built from the same
config, random init), weight conversion both ways, a batch, and a loss + gradients run. The driver does the rest the
same way for every family: converted weights into our model, the comparisons, the AdamW step.

Stochastic depth and dropout are switched off for parity (their random masks cannot match across frameworks). Two
optional hooks: ``batch_for(mode, data)`` (the batch as a mode runs it; default: ``data``) and
``real_rows(data, outputs)`` (our outputs cut to the rows the reference returns; default: all)."""

import dataclasses

import numpy as np

from jax_mamba.configs.schema import RunConfig
from jax_mamba.tasks import task_for


class LanguageModelSide:
    """mamba-ssm's ``MambaLMHeadModel``: byte-range token batches, next-token loss."""

    modes = ("train",)  # no batch statistics or dropout: one mode

    def __init__(self, ref, cfg: RunConfig, seed: int):
        from jax_mamba.checkpoints import convert
        from torch_reference.lm import TorchLM

        self.cfg, self.convert = cfg, convert
        self.torch = TorchLM(ref, cfg.model, seed)

    def our_variables(self) -> tuple[dict, dict]:
        return self.convert.from_torch_state_dict(self.torch.state_dict(), self.cfg.model), {}

    def to_torch(self, params: dict, state: dict) -> dict:
        return self.convert.to_torch_state_dict(params, self.cfg.model)

    def from_torch(self, values: dict) -> dict:
        return self.convert.from_torch_state_dict(values, self.cfg.model)

    def make_batch(self, rng: np.random.Generator, batch: int, size: int) -> dict:
        ids = rng.integers(0, self.cfg.model.vocab_size, size=(batch, size + 1)).astype(np.int32)
        return {"inputs": ids[:, :-1], "targets": ids[:, 1:], "mask": np.ones((batch, size), np.float32)}

    def torch_run(self, data: dict, compute_dtype: str, mode: str, smoothing: float):
        logits, loss, grads = self.torch.loss_and_grads(data["inputs"], data["targets"], compute_dtype, smoothing)
        return logits, loss, grads, {}


class _BatchStatsSide:
    """What the families with BatchNorm running statistics share: compared in eval mode (running statistics, moved
    off their (0, 1) start so that their use is tested) and in training mode (batch statistics, and the running
    statistics a forward leaves); our variables are params plus state."""

    modes = ("eval", "train")

    def _perturb_buffers(self, seed: int) -> None:
        import torch

        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, buffer in self.torch.model.named_buffers():
                if name.endswith("running_mean"):
                    buffer.copy_(torch.randn(buffer.shape, generator=generator) * 0.1)
                elif name.endswith("running_var"):
                    buffer.copy_(torch.rand(buffer.shape, generator=generator) + 0.5)

    def our_variables(self) -> tuple[dict, dict]:
        variables = self.convert.from_torch_state_dict(self.torch.state_dict(), self.cfg.model)
        return self.convert.split_variables(variables, self.cfg.model)

    def to_torch(self, params: dict, state: dict) -> dict:
        return self.convert.to_torch_state_dict({**params, **state}, self.cfg.model)

    def from_torch(self, values: dict) -> dict:
        params, _ = self.convert.split_variables(
            self.convert.from_torch_state_dict({**self.torch.state_dict(), **values}, self.cfg.model), self.cfg.model
        )
        return params


RELU_MARGIN = 1e-5  # far above the frameworks' float32 rounding of a stem pre-activation of order 1
MAX_DRAWS = 20  # about 0.1 redraws are expected per batch at 12k stem pre-activations


class MambaVisionSide(_BatchStatsSide):
    """NVlabs' ``MambaVision`` (the mambavision package): random uint8 images, classification loss."""

    def __init__(self, ref, cfg: RunConfig, seed: int):
        from jax_mamba.checkpoints import convert_mamba_vision as convert
        from torch_reference.mamba_vision import TorchMambaVision

        self.cfg, self.convert = cfg, convert
        self.torch = TorchMambaVision(ref, cfg.model, seed)
        self._perturb_buffers(seed)

    def make_batch(self, rng: np.random.Generator, batch: int, size: int) -> dict:
        """Random images, drawn again while one of the stem's ReLUs receives a value within ``RELU_MARGIN`` of 0 (in
        either mode): float32 rounding could put it on different sides of the ReLU in the two frameworks, which
        moves the stem's gradients by a finite amount (seen once in CI: a value of 6e-9)."""
        for _ in range(MAX_DRAWS):
            images = rng.integers(0, 256, size=(batch, size, size, self.cfg.model.in_chans), dtype=np.uint8)
            float_images = np.asarray(task_for(self._float_cfg()).normalize(images))
            if min(np.abs(x).min() for x in self.torch.stem_relu_inputs(float_images)) >= RELU_MARGIN:
                break
        else:
            raise RuntimeError(f"no images in {MAX_DRAWS} draws kept the stem's ReLU inputs {RELU_MARGIN} from 0")
        labels = rng.integers(0, self.cfg.model.num_classes, size=batch).astype(np.int32)
        return {"images": images, "labels": labels, "mask": np.ones(batch, np.float32)}

    def _float_cfg(self) -> RunConfig:
        return dataclasses.replace(self.cfg, model=dataclasses.replace(self.cfg.model, compute_dtype="float32"))

    def torch_run(self, data: dict, compute_dtype: str, mode: str, smoothing: float):
        images = np.asarray(task_for(self._float_cfg()).normalize(data["images"]))  # the same float inputs as ours
        return self.torch.loss_and_grads(
            images, data["labels"], compute_dtype, train=mode == "train", label_smoothing=smoothing
        )


class GraphMambaSide(_BatchStatsSide):
    """Graph-Mamba on torch_geometric + mamba-ssm (``torch_reference.graph_mamba``): random small graphs padded as
    ours (``size`` is the largest graph's node count), the task's loss. Both sides see the same degree tie-breaking
    noise (one ordering per layer in training, ``eval_orderings`` in eval: ``batch_for`` picks) and LapPE signs."""

    def __init__(self, ref, cfg: RunConfig, seed: int):
        from jax_mamba.checkpoints import convert_graph_mamba as convert
        from torch_reference.graph_mamba import TorchGraphMamba

        self.cfg, self.convert = cfg, convert
        self.torch = TorchGraphMamba(ref, cfg.model, seed)
        self._perturb_buffers(seed)

    def _perturb_buffers(self, seed: int) -> None:
        """The statistics of a training forward on another random batch, then moved at random (means by up to
        0.1 standard deviations, variances by a factor in [0.5, 1.5)): eval mode tests their use, and deep models
        stay finite (with their (0, 1) start, activations grow with every layer: 1e30 after 6 CLUSTER layers)."""
        import torch

        calibration = self.make_batch(np.random.default_rng(seed + 1), 4, 16)
        self.torch.set_running_statistics(self.batch_for("train", calibration))
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for module in self.torch.model.modules():
                if isinstance(module, torch.nn.BatchNorm1d):
                    std = module.running_var.sqrt()
                    noise = torch.rand(std.shape, generator=generator) * 0.2 - 0.1
                    module.running_mean.add_(noise.to(std.device) * std)
                    module.running_var.mul_(torch.rand(std.shape, generator=generator).to(std.device) + 0.5)

    def make_batch(self, rng: np.random.Generator, batch: int, size: int) -> dict:
        from compare.parity.graph_batch import random_graph_batch, random_order_noise, random_signs

        m = self.cfg.model
        data = random_graph_batch(rng, m, batch, size, self.cfg.data.lap_pe_freqs)
        num_nodes = data["node_mask"].shape[0]
        data["order_noise"] = random_order_noise(rng, m, m.eval_orderings, num_nodes)
        data["train_order_noise"] = random_order_noise(rng, m, 1, num_nodes)
        if m.lap_pe_dim:
            data["eig_signs"] = random_signs(rng, data["eigvecs"].shape[1])
        return data

    def batch_for(self, mode: str, data: dict) -> dict:
        """The batch as ``mode`` runs it: training takes the one-ordering noise."""
        data = dict(data)
        train_noise = data.pop("train_order_noise")
        if mode == "train":
            data["order_noise"] = train_noise
        return data

    def real_rows(self, data: dict, outputs: np.ndarray) -> np.ndarray:
        """Our padded outputs (N or B rows) -> the real nodes' or graphs' rows, as the reference gives them."""
        mask = data["node_mask"] if self.cfg.model.task_level == "node" else data["graph_mask"]
        return outputs[np.asarray(mask) > 0]

    def torch_run(self, data: dict, compute_dtype: str, mode: str, smoothing: float):
        return self.torch.loss_and_grads(data, compute_dtype, train=mode == "train", label_smoothing=smoothing)


SIDES = {"lm": LanguageModelSide, "mamba_vision": MambaVisionSide, "graph_mamba": GraphMambaSide}


def without_randomness(cfg: RunConfig) -> RunConfig:
    """The config with stochastic depth and dropout off (MambaVision, Graph-Mamba); language models have none."""
    if cfg.family == "mamba_vision":
        model = dataclasses.replace(cfg.model, drop_path_rate=0.0, drop_rate=0.0, attn_drop_rate=0.0)
    elif cfg.family == "graph_mamba":
        model = dataclasses.replace(cfg.model, dropout=0.0)
    else:
        return cfg
    return dataclasses.replace(cfg, model=model)
