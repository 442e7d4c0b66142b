"""Each family's PyTorch side for the parity driver (``compare.parity``): its reference model (built from the same
config, random init), weight conversion both ways, a batch, and a loss + gradients run. The driver does the rest the
same way for every family: converted weights into our model, the comparisons, the AdamW step.

Stochastic depth and dropout are switched off for parity (their random masks cannot match across frameworks)."""

import dataclasses

import numpy as np

from jax_mamba.configs.schema import RunConfig
from jax_mamba.tasks import task_for


class LanguageModelSide:
    """mamba-ssm's ``MambaLMHeadModel``: byte-range token batches, next-token loss."""

    modes = ("train",)  # no batch statistics or dropout: one mode

    def __init__(self, ref, cfg: RunConfig, seed: int):
        from torch_reference import convert
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


class MambaVisionSide:
    """NVlabs' ``MambaVision`` (the mambavision package): random uint8 images, classification loss; compared in
    training mode (batch statistics, running-statistics update) and in eval mode."""

    modes = ("eval", "train")

    def __init__(self, ref, cfg: RunConfig, seed: int):
        from torch_reference import convert_mamba_vision as convert
        from torch_reference.mamba_vision import TorchMambaVision

        self.cfg, self.convert = cfg, convert
        self.torch = TorchMambaVision(ref, cfg.model, seed)
        self._perturb_buffers(seed)

    def _perturb_buffers(self, seed: int) -> None:
        """Running statistics away from their (0, 1) start, so that eval mode tests their use."""
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

    def make_batch(self, rng: np.random.Generator, batch: int, size: int) -> dict:
        images = rng.integers(0, 256, size=(batch, size, size, self.cfg.model.in_chans), dtype=np.uint8)
        labels = rng.integers(0, self.cfg.model.num_classes, size=batch).astype(np.int32)
        return {"images": images, "labels": labels, "mask": np.ones(batch, np.float32)}

    def torch_run(self, data: dict, compute_dtype: str, mode: str, smoothing: float):
        float_cfg = dataclasses.replace(self.cfg, model=dataclasses.replace(self.cfg.model, compute_dtype="float32"))
        images = np.asarray(task_for(float_cfg).normalize(data["images"]))  # the same float inputs as ours
        return self.torch.loss_and_grads(
            images, data["labels"], compute_dtype, train=mode == "train", label_smoothing=smoothing
        )


SIDES = {"lm": LanguageModelSide, "mamba_vision": MambaVisionSide}


def without_randomness(cfg: RunConfig) -> RunConfig:
    """The config with stochastic depth and dropout off (MambaVision); language models have none."""
    if cfg.family != "mamba_vision":
        return cfg
    model = dataclasses.replace(cfg.model, drop_path_rate=0.0, drop_rate=0.0, attn_drop_rate=0.0)
    return dataclasses.replace(cfg, model=model)
