"""Image classification (family ``mamba_vision``): NVlabs' MambaVision on labelled images, label-smoothed
cross-entropy, top-1/top-5 accuracy. Images arrive as uint8 and are normalized on the device."""

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.configs.schema import RunConfig, rand_augment_policy
from jax_mamba.data import Batch, DataError, Dataset, make_dataset
from jax_mamba.models import MambaVision
from jax_mamba.modules.impl import compute_dtype_for
from jax_mamba.tasks.image_augment import mix_batch, random_erase
from jax_mamba.tasks.losses import cross_entropy, top_k_correct
from jax_mamba.tasks.rand_augment import rand_augment


class ImageClassification:
    unit = "images"
    head_patterns = ("head.*",)  # the classifier (--init_from_skip=head)

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.rand_augment = rand_augment_policy(cfg.data.rand_augment)

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module:
        return MambaVision(self.cfg.model, rngs=rngs)

    def make_dataset(self) -> Dataset:
        if self.cfg.model.in_chans != 3:
            raise DataError(f"image data is RGB: model.in_chans must be 3, got {self.cfg.model.in_chans}")
        dataset = make_dataset(self.cfg.data, self.cfg.train)
        if self.cfg.model.num_classes < dataset.num_classes:
            raise DataError(
                f"model.num_classes={self.cfg.model.num_classes} is smaller than the data's "
                f"{dataset.num_classes} classes; set --model.num_classes={dataset.num_classes}"
            )
        return dataset

    def items_per_batch(self) -> int:
        return self.cfg.train.batch_size

    def normalize(self, images: jax.Array) -> jax.Array:
        """uint8 (..., H, W, 3) -> (x / 255 - mean) / std in the compute dtype."""
        mean = jnp.asarray(self.cfg.data.mean, jnp.float32) * 255.0
        inv_std = 1.0 / (jnp.asarray(self.cfg.data.std, jnp.float32) * 255.0)
        x = (images.astype(jnp.float32) - mean) * inv_std
        return x.astype(compute_dtype_for(self.cfg.model))

    def forward(self, model, batch: Batch, rngs=None) -> jax.Array:
        """logits (batch, classes) float32 of the batch's uint8 images."""
        return model(self.normalize(batch["images"]), rngs)

    def loss_terms(self, model, batch: Batch, *, train: bool, rngs=None) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Summed cross-entropy (label-smoothed in training if configured) over the scored samples, their count and
        the top-1 / top-5 hits (against the unmixed labels). In training, the configured on-device augmentations
        (``rand_augment`` on the 0-255 images; ``image_augment``: random erasing, mixup / cutmix with their mixed
        targets) draw from ``rngs``."""
        labels, mask = batch["labels"], batch["mask"]
        smoothing = self.cfg.train.label_smoothing if train else 0.0
        d = self.cfg.data
        augmented = self.rand_augment is not None or d.random_erase > 0 or d.mixup_alpha > 0 or d.cutmix_alpha > 0
        if train and augmented:
            images, lam = self.augmented_inputs(batch["images"], rngs.dropout())
        else:
            images, lam = self.normalize(batch["images"]), None
        logits = model(images, rngs)
        loss = cross_entropy(logits, labels, smoothing)
        if lam is not None:  # the target is lam x the labels + (1 - lam) x the reversed batch's: CE is linear in it
            loss = lam * loss + (1.0 - lam) * cross_entropy(logits, labels[::-1], smoothing)
        top1 = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
        return jnp.sum(loss * mask), {
            "count": jnp.sum(mask),
            "top1": jnp.sum(top1 * mask),
            "top5": jnp.sum(top_k_correct(logits, labels, 5) * mask),
        }

    def augmented_inputs(self, images: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array | None]:
        """(normalized training images, mixup / cutmix share ``lam`` or None) of the uint8 ``images`` (batch, H, W,
        3): RandAugment on the 0-255 values, normalization, random erasing, then mixup / cutmix, as configured, each
        drawing from its own split of ``key``."""
        d, lam = self.cfg.data, None
        k_rand, k_erase, k_mix = jax.random.split(key, 3)
        if self.rand_augment is not None:
            fill = jnp.round(jnp.asarray(d.mean, jnp.float32) * 255.0)  # timm's img_mean
            images = rand_augment(k_rand, images.astype(jnp.float32), self.rand_augment, fill)
        images = self.normalize(images)
        if d.random_erase > 0:
            images = random_erase(k_erase, images, d.random_erase)
        if d.mixup_alpha > 0 or d.cutmix_alpha > 0:
            images, lam = mix_batch(k_mix, images, d.mixup_alpha, d.cutmix_alpha, d.mixup_switch_prob)
        return images, lam

    def train_metrics(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return {"top1": sums["top1"] / jnp.maximum(sums["count"], 1.0)}

    def eval_metrics(self, loss_sum: float, sums: dict[str, float]) -> dict[str, float]:
        count = max(sums["count"], 1.0)
        loss = loss_sum / count
        return {
            "eval_loss": loss,
            "eval_top1": sums["top1"] / count,
            "eval_top5": sums["top5"] / count,
        }

    def weight_decay_mask(self, params: dict[str, jax.Array]) -> dict[str, bool]:
        """timm's rule, which NVlabs' training uses: decay every parameter of two or more dimensions (Linear and
        conv weights, the mixers' A_log), never biases, norms, layer scales or D."""
        return {name: value.ndim >= 2 for name, value in params.items()}
