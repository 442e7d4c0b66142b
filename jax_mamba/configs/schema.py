"""Configuration dataclasses. A run's ``family`` picks its model section: ``ModelConfig`` (family ``lm``) mirrors
mamba-ssm's ``MambaConfig`` (``ssm_cfg``/``attn_cfg`` as typed sections) and ``MambaVisionConfig`` (family
``mamba_vision``) NVlabs' ``MambaVision`` arguments, so that configs convert field by field; the rest describe a
training run.

``validate`` checks a whole ``RunConfig`` and raises ``ValueError`` naming the offending field by its dotted path.
"""

import math
import re
from dataclasses import dataclass, field

MODEL_IMPLS = ("auto", "reference", "pallas", "mamba_ssm_triton")  # what each means: jax_mamba.modules.impl
SCAN_BACKENDS = ("triton", "mosaic_gpu", "auto")  # the Pallas selective scan's kernels: pallas_kernels' ``backend``

SSM_LAYERS = ("Mamba1", "Mamba2", "Mamba3")
# Mamba-3's A = -f(dd_A): softplus as mamba-ssm 2.3.2.post1's Mamba3; heavy_tail (1 + x above 0, 1 / (1 - x) below)
# as mamba-ssm's main since its PR 962 and mamba3-jax
MAMBA3_A_ACTIVATIONS = ("softplus", "heavy_tail")
COMPUTE_DTYPES = ("auto", "float32", "bfloat16")
FAMILIES = ("lm", "mamba_vision", "graph_mamba")
DATA_KINDS = {  # family: the data kinds its task reads
    "lm": ("stdlib", "text", "tokens", "selective_copying", "induction_heads"),
    "mamba_vision": ("shapes", "image_folder"),
    "graph_mamba": ("cluster", "pattern", "graph_classes", "synthetic_peptides", "pyg"),
}
# what ``--data PATH`` means per family
PATH_DATA_KIND = {"lm": "text", "mamba_vision": "image_folder", "graph_mamba": "pyg"}
# data.kind where a config names none
EMBEDDED_DATA_KIND = {"lm": "stdlib", "mamba_vision": "shapes", "graph_mamba": "cluster"}
OPTIMIZERS = ("adamw", "lamb")
GRAPH_TASK_LEVELS = ("node", "graph")
GRAPH_TASK_TYPES = ("multiclass", "multilabel", "regression")
GRAPH_FEATURE_KINDS = ("dense", "categorical")
GRAPH_EDGE_KINDS = ("none", "dense", "categorical")
BAD_IMAGE_POLICIES = ("stop", "skip")
WORKER_TYPES = ("process", "thread")
TOKEN_DTYPES = ("uint16", "uint32")


@dataclass
class SSMConfig:
    """mamba-ssm's ``ssm_cfg``: the arguments of ``Mamba`` (layer Mamba1), ``Mamba2`` (layer Mamba2) or ``Mamba3``
    (layer Mamba3, SISO: headdim, ngroups and chunk_size as Mamba2's, and the fields below)."""

    layer: str = "Mamba1"
    d_state: int | None = None  # None: 16 for Mamba1, 128 for Mamba2 (mamba-ssm's defaults)
    d_conv: int = 4
    expand: int = 2
    dt_min: float = 0.001
    dt_max: float = 0.1
    dt_init_floor: float = 1e-4
    conv_bias: bool = True
    bias: bool = False
    # Mamba1 only
    dt_rank: int | str = "auto"  # "auto": ceil(d_model / 16)
    dt_init: str = "random"  # or "constant"
    dt_scale: float = 1.0
    # Mamba2 only
    headdim: int = 64
    d_ssm: int | None = None  # None: the whole d_inner is SSM; else d_inner - d_ssm channels form a gated MLP
    ngroups: int = 1
    A_init_range: tuple[float, float] = (1.0, 16.0)
    D_has_hdim: bool = False
    rmsnorm: bool = True
    norm_before_gate: bool = False
    dt_limit: tuple[float, float] = (0.0, math.inf)
    chunk_size: int = 256
    conv_init: float | None = None
    # Mamba3 only
    rope_fraction: float = 0.5
    A_floor: float = 1e-4
    A_activation: str = "softplus"  # one of MAMBA3_A_ACTIVATIONS
    is_outproj_norm: bool = False
    is_mimo: bool = False
    mimo_rank: int = 4

    def resolved_d_state(self) -> int:
        if self.d_state is not None:
            return self.d_state
        return 16 if self.layer == "Mamba1" else 128


@dataclass
class AttnConfig:
    """mamba-ssm's ``attn_cfg``: the arguments of ``MHA`` for the layers in ``attn_layer_idx``.

    ``causal`` defaults to True here (mamba-ssm's MHA defaults to False and its hybrid configs set it)."""

    num_heads: int = 0
    num_heads_kv: int | None = None
    head_dim: int | None = None
    mlp_dim: int = 0
    qkv_proj_bias: bool = True
    out_proj_bias: bool = True
    softmax_scale: float | None = None
    causal: bool = True
    d_conv: int = 0
    rotary_emb_dim: int = 0
    rotary_emb_base: float = 10000.0
    rotary_emb_interleaved: bool = False


@dataclass
class ModelConfig:
    """Architecture (mamba-ssm's MambaConfig fields) plus how to run it (impl, compute_dtype, remat,
    scan_checkpoint_every, mixer_remat)."""

    d_model: int = 768
    d_intermediate: int = 0
    n_layer: int = 24
    vocab_size: int = 50277
    ssm_cfg: SSMConfig = field(default_factory=SSMConfig)
    attn_layer_idx: list[int] = field(default_factory=list)
    attn_cfg: AttnConfig = field(default_factory=AttnConfig)
    rms_norm: bool = True
    residual_in_fp32: bool = True
    norm_epsilon: float = 1e-5
    pad_vocab_size_multiple: int = 8
    tie_embeddings: bool = True
    initializer_range: float = 0.02
    # How to run it (not part of mamba-ssm's config):
    impl: str = (
        "auto"  # kernels: "auto" (Pallas where an op has one, on GPU), "pallas" or "reference"; see modules.impl
    )
    compute_dtype: str = "auto"  # "auto": bfloat16 on GPU, float32 on CPU; params are always float32
    remat: bool = False  # recompute each block in the backward pass (less memory, about 1/3 more compute)
    # Mamba-1's Pallas scan: steps between the states kept for the backward (0: all it reads, every 8 steps: no
    # state-rebuild kernel in the backward, 8.5 of 111 ms per 130m step on an H100, for (batch, L / 8, 16,
    # d_inner) float32 more per layer)
    scan_checkpoint_every: int = 256
    # Mamba-1's Pallas scan: its kernels, "triton", "mosaic_gpu" or "auto" (``selective_scan_fn``'s ``backend``)
    scan_backend: str = "triton"
    # Mamba-2's Pallas SSD: positions between the states its forward keeps for the backward (None: the kernels'
    # choice, every 64-position block's state while a layer's are under 256 MiB, e.g. 201 MB a layer at 780m, L 2048
    # x 8; 0: every block's; a multiple of 64: float32 states that often, the others rebuilt in the backward; the
    # configs of 780m and up set 1024, lm-2048-large)
    ssd_checkpoint_every: int | None = None
    # With the Pallas kernels: the backward recomputes each Mamba mixer's conv, projections and gated norm (Mamba-3:
    # its rotations, scales and correction) from in_proj's output, keeping only the scan's or SSD's named states (and
    # Mamba-2's SSD output, Mamba-3's kernels' output), as mamba-ssm's fused layers do. False keeps those activations
    # instead: more memory, less recomputation.
    mixer_remat: bool = True

    def padded_vocab_size(self) -> int:
        multiple = self.pad_vocab_size_multiple
        return -(-self.vocab_size // multiple) * multiple


@dataclass
class MambaVisionConfig:
    """NVlabs' ``MambaVision(...)`` arguments (``mambavision/models/mamba_vision.py``), plus how to run it.

    Four stages: two of residual conv blocks, then two whose first half (rounded down) are MambaVision mixer blocks
    and the rest windowed self-attention; stage i has ``dim * 2**i`` channels and a stride-2 conv downsample after
    it (not after the last). The mixers use NVlabs' fixed d_state 8, d_conv 3, expand 1."""

    dim: int = 80
    in_dim: int = 32  # channels after the stem's first conv
    depths: list[int] = field(default_factory=lambda: [1, 3, 8, 4])
    num_heads: list[int] = field(default_factory=lambda: [2, 4, 8, 16])
    window_size: list[int] = field(default_factory=lambda: [8, 8, 14, 7])
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.2  # stochastic depth, linear in the block index from 0 to this
    in_chans: int = 3
    num_classes: int = 1000
    qkv_bias: bool = True
    qk_scale: bool | None = None  # NVlabs passes it as the attention's qk_norm: LayerNorm on q and k when true
    drop_rate: float = 0.0  # dropout after the attention projection and in the MLPs
    attn_drop_rate: float = 0.0  # dropout on the attention probabilities (training only)
    layer_scale: float | None = None  # initial value of per-channel scales on the hybrid blocks' branches
    layer_scale_conv: float | None = None  # the same for the conv blocks
    # How to run it (not part of NVlabs' arguments):
    impl: str = "auto"  # the selective scan: "auto" (Pallas on GPU), "pallas" or "reference"; see modules.impl
    compute_dtype: str = "auto"  # "auto": bfloat16 on GPU, float32 on CPU; params and norm statistics stay float32
    remat: bool = False  # recompute each hybrid block in the backward pass
    scan_backend: str = "triton"  # the Pallas scan's kernels: "triton", "mosaic_gpu" or "auto" (as ModelConfig's)


@dataclass
class GraphMambaConfig:
    """Graph-Mamba (Wang et al. 2024; bowang-lab/Graph-Mamba's ``GPSModel`` with layer type
    ``CustomGatedGCN+Mamba_Hybrid_Degree_Noise``): node/edge encoders (plus Laplacian positional encodings), then
    ``n_layers`` GPS layers of a local GatedGCN and a global Mamba-1 over each graph's nodes ordered by degree, then
    a node or graph (mean-pooled) head. Input and output fields describe the data and are checked against it."""

    dim_hidden: int = 96
    n_layers: int = 3
    dropout: float = 0.0  # GatedGCN's node/edge dropout, the Mamba branch's and the FFN's (GraphGPS gt.dropout)
    d_state: int = 16  # the global Mamba-1 (Graph-Mamba's fixed d_state 16, d_conv 4, expand 1)
    d_conv: int = 4
    expand: int = 1
    eval_orderings: int = 5  # eval: the Mamba branch averaged over this many random tie-breaking orderings
    # Inputs (what the data holds; checked against it)
    node_feature_kind: str = "dense"  # "dense": a Linear on float features; "categorical": summed embeddings
    node_in_dim: int = 7  # dense: features per node
    node_vocab: list[int] = field(default_factory=list)  # categorical: cardinality of each feature column
    edge_feature_kind: str = "none"  # "none": one learned embedding for every edge (GraphGPS DummyEdge)
    edge_in_dim: int = 0
    edge_vocab: list[int] = field(default_factory=list)
    lap_pe_dim: int = 16  # width of the LapPE (DeepSet) encoding concatenated to the node encoding; 0: none
    # (how many eigenpairs per graph it reads: data.lap_pe_freqs)
    lap_pe_layers: int = 2  # DeepSet layers
    # Outputs
    task_level: str = "node"  # "node" or "graph" (mean pooling)
    task_type: str = "multiclass"  # "multiclass", "multilabel" (sigmoid per target) or "regression"
    num_outputs: int = 6  # classes or targets
    head_layers: int = 1  # GraphGym's post-MP MLP: hidden Linear + ReLU + L2 normalization, then a Linear
    # GraphGPS's weighted_cross_entropy (loss_fun), multiclass only: each class weighted per batch by
    # (rows - rows of that class) / rows, absent classes 0, the loss the weighted mean (CLUSTER and PATTERN use it)
    class_weighted_loss: bool = False
    # How to run it
    impl: str = "auto"  # the selective scan: "auto" (Pallas on GPU), "pallas" or "reference"; see modules.impl
    compute_dtype: str = "auto"  # "auto": bfloat16 on GPU, float32 on CPU; params and norm statistics stay float32
    remat: bool = False  # recompute each GPS layer in the backward pass


MODEL_CONFIGS = {
    "lm": ModelConfig,
    "mamba_vision": MambaVisionConfig,
    "graph_mamba": GraphMambaConfig,
}  # family -> model section


@dataclass
class OptimConfig:
    """AdamW (or LAMB) with linear warmup then cosine decay to ``min_lr``, global-norm clipping (the Mamba paper's
    recipe; NVlabs trains MambaVision with LAMB)."""

    name: str = "adamw"  # or "lamb" (optax.lamb: AdamW's update scaled per parameter by its trust ratio)
    lr: float = 1e-3
    min_lr: float = 1e-5
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0  # 0 disables clipping
    # Parameter groups by comma-separated fnmatch patterns over parameter names (or "head": the task's output layer;
    # jax_mamba.train.optim): ``freeze`` keeps those unchanged (no optimizer state), ``train_only`` freezes all others;
    # ``lr_scale`` "PATTERN=SCALE,..." multiplies their learning rate (the first matching entry counts)
    freeze: str = ""
    train_only: str = ""
    lr_scale: str = ""
    # An exponential moving average of the weights, kept in the optimizer state (so in checkpoints) and evaluated
    # beside them (ema_* metrics): ema <- decay * ema + (1 - decay) * params after every step; 0 keeps none
    ema_decay: float = 0.0


@dataclass
class DataConfig:
    """Where batches come from.

    Language models: ``stdlib``: byte-level Python standard library sources (embedded default); ``text``: a user's
    text file or folder (bytes, or the ids of ``tokenizer`` when set); ``tokens``: pre-tokenized ids, memory-mapped
    (a folder written by ``python -m jax_mamba.data.tokenize``, or one flat .bin file of ``token_dtype`` ids);
    ``selective_copying``/``induction_heads``: the Mamba paper's synthetic tasks, scored by accuracy.
    Images: ``shapes``: generated images of ten shape classes (embedded default); ``image_folder``: a folder
    with one subfolder of images per class (ImageNet layout, optionally split into train/ and val/). Graphs:
    ``cluster``/``pattern``: generated CLUSTER-/PATTERN-like node classification (embedded default: cluster);
    ``graph_classes``: generated graph classification; ``synthetic_peptides``: generated peptide-like molecules (a
    stand-in for LRGB peptides-func); ``pyg``: a PyG dataset saved on disk (jax_mamba.data.graphs)."""

    kind: str = "stdlib"
    path: str | None = None
    val_fraction: float = 0.05
    # Language models: a tokenizer.json (Hugging Face tokenizers) for stdlib/text instead of bytes; with "tokens",
    # the one that wrote the files (meta.json names it otherwise): generation decodes with it
    tokenizer: str | None = None
    token_dtype: str = "uint16"  # "tokens" from a bare .bin file without meta.json: uint16 or uint32 ids
    num_symbols: int = 16  # synthetic tasks: distinct data tokens
    num_tokens_to_copy: int = 16  # selective copying: tokens to memorize
    # Images
    image_size: int = 224  # side of the square crops the model sees, pixels
    crop_pct: float = 0.875  # eval: resize the shorter side to image_size / crop_pct, then center crop
    min_scale: float = 0.08  # train: random resized crops cover this to 1.0 of the image area
    hflip: float = 0.5  # train: probability of a horizontal flip
    # train, on the device: RandAugment on the 0-255 images before normalization (timm's policy string, unset: off;
    # jax_mamba.tasks.rand_augment), then (jax_mamba.tasks.image_augment) random erasing's per-image probability,
    # mixup / cutmix over the batch (Beta(alpha, alpha) shares; 0 turns one off; with both, cutmix with
    # mixup_switch_prob)
    rand_augment: str | None = None
    random_erase: float = 0.0
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0
    mixup_switch_prob: float = 0.5
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)  # per-channel normalization, on the device
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    num_workers: int = 0  # decoding workers; 0: one per CPU core
    worker_type: str = "process"  # decode in worker "process"es (scales with cores) or "thread"s (no start-up)
    prefetch: int = 4  # training batches decoded ahead of the one in use
    bad_images: str = "stop"  # an unreadable image file: "stop" with an error naming it, or "skip" (count it)
    num_images: int = 4000  # shapes: images generated (val_fraction of them for validation)
    # Graphs
    num_graphs: int = 500  # generated graph sets: graphs generated (val_fraction of them for validation)
    lap_pe_freqs: int = 10  # Laplacian PE: lowest-frequency eigenpairs per graph (GraphGPS max_freqs); 0: none
    bucket_steps: int = 4  # padded batch sizes: this many sizes per octave (at most 1/steps padding, 25% for 4)


@dataclass
class TrainConfig:
    seed: int = 0
    batch_size: int = 16
    seq_len: int = 256
    max_steps: int = 300
    grad_accum_steps: int = 1
    log_every: int = 10
    eval_every: int = 100
    eval_batches: int = 8
    save_every: int = 100
    save_checkpoints: bool = True  # False: no checkpoint at all (throughput and scaling runs time the steps only)
    keep_checkpoints: int = 3
    run_dir: str | None = None  # None: runs/<config name>/<timestamp>
    stop_after_steps: int | None = None  # end this invocation early (preemptible jobs); continue with --resume
    progress: bool = True  # progress bar on stderr
    label_smoothing: float = 0.0  # cross-entropy targets: 1 - eps on the label, eps spread over all classes
    # Language models: positions whose logits exist at once on each device in the LM head and loss, recomputed in
    # the backward (0: automatic, LOSS_CHUNK_TOKENS positions where a device's share of a micro-batch would have more
    # than 4 GiB of float32 logits, else all)
    loss_chunk_tokens: int = 0
    # A new run's starting weights (jax_mamba.checkpoints.init_from): a mamba-ssm checkpoint folder (language
    # models), an NVlabs MambaVision folder or .pth.tar, or a run folder (or RUN/checkpoints/STEP); None: fresh
    init_from: str | None = None
    # comma-separated fnmatch patterns over parameter names (or "head") kept at their fresh initialization
    init_from_skip: str = ""


FSDP_GATHER = ("xla", "gather")
GRAD_REDUCE = ("xla", "early")


@dataclass
class MeshConfig:
    """How training spreads over the devices JAX sees (a ``jax.sharding.Mesh``): ``data`` replicas of the model,
    each holding its parameters and optimizer state split ``fsdp`` ways (FSDP); batches split over data x fsdp;
    with ``context`` > 1 (Mamba-2 language models) each sequence's positions split over that many devices too.
    data 0: every device not taken by fsdp x context. One device (the default on one GPU) is the unsharded path."""

    data: int = 0
    fsdp: int = 1
    context: int = 1  # Mamba-2 language models: each sequence's positions split over this many devices
    # How the step uses FSDP-split parameters: "gather" gathers each split parameter whole before the model runs and
    # reduce-scatters its gradient (train.sharding.gather_split_params); "xla" leaves it to XLA's partitioner, which
    # may split the matmuls over the weights' features and move activations instead (slower on every mesh measured
    # on H100s: benchmarks/README.md, multi-GPU scaling).
    fsdp_gather: str = "gather"
    # How a data-parallel step (fsdp 1, context 1) sums the devices' gradients: "xla" leaves it to XLA's partitioner
    # (the all-reduces it adds after each weight gradient ran after the whole backward on 2 GPUs); "early" computes
    # each device's gradients under shard_map, every weight gradient as soon as its layer's backward runs, and sums
    # them explicitly, so that each all-reduce may start while the layers before it run their backward
    # (train.step.make_train_step; modules.weight_grads).
    grad_reduce: str = "xla"


@dataclass
class RunConfig:
    name: str = "custom"
    family: str = "lm"  # model section and task: "lm", "mamba_vision" or "graph_mamba" (see MODEL_CONFIGS)
    model: ModelConfig | MambaVisionConfig | GraphMambaConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    mesh: MeshConfig = field(default_factory=MeshConfig)


def _is_positive_float(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


@dataclass(frozen=True)
class RandAugmentPolicy:
    """timm's RandAugment policy ``rand-m{magnitude}-n{layers}-mstd{magnitude_std}-inc{0|1}`` (jax_mamba.tasks.
    rand_augment): ``layers`` operations an image, magnitudes (0-10) drawn from N(magnitude, magnitude_std);
    ``increasing``: timm's operation set whose every change grows with the magnitude."""

    magnitude: float = 9.0
    layers: int = 2
    magnitude_std: float = 0.0
    increasing: bool = False


RAND_AUGMENT_FORM = "timm's form rand-m<0..10>[-n<layers>][-mstd<std>][-inc<0|1>], e.g. rand-m9-mstd0.5-inc1"


def rand_augment_policy(spec: str | None) -> RandAugmentPolicy | None:
    """``data.rand_augment`` parsed (timm's defaults for absent sections: m9, n2, mstd0, inc0); unset or "" is None
    (off). A malformed string raises ValueError naming the field and the expected form."""
    if not spec:
        return None
    sections = spec.split("-")
    found = [re.fullmatch(r"(mstd|inc|m|n)(\d+(?:\.\d+)?)", section) for section in sections[1:]]
    _require(sections[0] == "rand" and all(found), "data.rand_augment", RAND_AUGMENT_FORM, spec)
    fields = {match.group(1): float(match.group(2)) for match in found}
    magnitude, layers, increasing = fields.get("m", 9.0), fields.get("n", 2.0), fields.get("inc", 0.0)
    fits = 0 <= magnitude <= 10 and layers >= 1 and layers.is_integer() and increasing in (0, 1)
    _require(fits, "data.rand_augment", RAND_AUGMENT_FORM, spec)
    return RandAugmentPolicy(magnitude, int(layers), fields.get("mstd", 0.0), increasing == 1)


def _require(ok: bool, path: str, expected: str, value) -> None:
    if not ok:
        raise ValueError(f"config field {path}: expected {expected}, got {value!r}")


def _positive(path: str, value) -> None:
    _require(isinstance(value, int) and value > 0, path, "a positive integer", value)


def validate_model(m: ModelConfig) -> ModelConfig:
    """Check a model section; raise ValueError naming the field (as ``model.<path>``). Returns ``m``."""
    s, a = m.ssm_cfg, m.attn_cfg
    for name in ("d_model", "n_layer", "vocab_size", "pad_vocab_size_multiple"):
        _positive(f"model.{name}", getattr(m, name))
    _require(m.d_intermediate >= 0, "model.d_intermediate", "an integer >= 0", m.d_intermediate)
    _require(m.norm_epsilon > 0, "model.norm_epsilon", "a positive float", m.norm_epsilon)
    _require(m.impl in MODEL_IMPLS, "model.impl", f"one of {MODEL_IMPLS}", m.impl)
    _require(m.compute_dtype in COMPUTE_DTYPES, "model.compute_dtype", f"one of {COMPUTE_DTYPES}", m.compute_dtype)
    _require(m.scan_backend in SCAN_BACKENDS, "model.scan_backend", f"one of {SCAN_BACKENDS}", m.scan_backend)
    every = m.scan_checkpoint_every
    _require(
        every == 0 or (every >= 16 and every & (every - 1) == 0),
        "model.scan_checkpoint_every",
        "0 or a power of two >= 16",
        every,
    )
    kept = m.ssd_checkpoint_every
    _require(
        kept is None or (kept >= 0 and kept % 64 == 0),
        "model.ssd_checkpoint_every",
        "null, 0 or a positive multiple of 64",
        kept,
    )
    bad_idx = [i for i in m.attn_layer_idx if not 0 <= i < m.n_layer]
    _require(not bad_idx, "model.attn_layer_idx", f"layer indices in [0, n_layer={m.n_layer})", m.attn_layer_idx)

    _require(s.layer in SSM_LAYERS, "model.ssm_cfg.layer", f"one of {SSM_LAYERS}", s.layer)
    for name in ("d_conv", "expand", "headdim", "ngroups", "chunk_size"):
        _positive(f"model.ssm_cfg.{name}", getattr(s, name))
    _positive("model.ssm_cfg.d_state", s.resolved_d_state())
    _require(0 < s.dt_min <= s.dt_max, "model.ssm_cfg.dt_min/dt_max", "0 < dt_min <= dt_max", (s.dt_min, s.dt_max))
    _require(s.dt_init_floor >= 0, "model.ssm_cfg.dt_init_floor", "a float >= 0", s.dt_init_floor)
    d_inner = s.expand * m.d_model
    if s.layer == "Mamba1":
        _require(
            s.dt_rank == "auto" or (isinstance(s.dt_rank, int) and s.dt_rank > 0),
            "model.ssm_cfg.dt_rank",
            "'auto' or a positive integer",
            s.dt_rank,
        )
        _require(s.dt_init in ("random", "constant"), "model.ssm_cfg.dt_init", "'random' or 'constant'", s.dt_init)
    elif s.layer == "Mamba3":
        _require(s.rope_fraction in (0.5, 1.0), "model.ssm_cfg.rope_fraction", "0.5 or 1.0", s.rope_fraction)
        _require(s.A_floor > 0, "model.ssm_cfg.A_floor", "a float > 0", s.A_floor)
        _require(
            s.A_activation in MAMBA3_A_ACTIVATIONS,
            "model.ssm_cfg.A_activation",
            " or ".join(map(repr, MAMBA3_A_ACTIVATIONS)),
            s.A_activation,
        )
        if s.is_mimo:
            _require(
                isinstance(s.mimo_rank, int) and s.mimo_rank >= 1, "model.ssm_cfg.mimo_rank", "an int >= 1", s.mimo_rank
            )
            divisor = round(2 / s.rope_fraction)
            _require(
                s.resolved_d_state() % divisor == 0,
                "model.ssm_cfg.d_state",
                f"a multiple of {divisor} for MIMO at rope_fraction {s.rope_fraction}",
                s.resolved_d_state(),
            )
        _require(
            d_inner % s.headdim == 0 and (d_inner // s.headdim) % s.ngroups == 0,
            "model.ssm_cfg.headdim/ngroups",
            f"headdim dividing d_inner={d_inner} into heads that ngroups divides",
            (s.headdim, s.ngroups),
        )
    else:
        d_ssm = d_inner if s.d_ssm is None else s.d_ssm
        _require(0 < d_ssm <= d_inner, "model.ssm_cfg.d_ssm", f"in (0, d_inner={d_inner}]", s.d_ssm)
        _require(
            d_ssm % s.headdim == 0,
            "model.ssm_cfg.headdim",
            f"a divisor of d_ssm={d_ssm} (expand * d_model unless d_ssm is set)",
            s.headdim,
        )
        _require(
            (d_ssm // s.headdim) % s.ngroups == 0,
            "model.ssm_cfg.ngroups",
            f"a divisor of the number of heads ({d_ssm // s.headdim})",
            s.ngroups,
        )
        _require(s.chunk_size & (s.chunk_size - 1) == 0, "model.ssm_cfg.chunk_size", "a power of two", s.chunk_size)
        low, high = s.A_init_range
        _require(0 < low <= high, "model.ssm_cfg.A_init_range", "0 < low <= high", s.A_init_range)
        _require(0 <= s.dt_limit[0] <= s.dt_limit[1], "model.ssm_cfg.dt_limit", "0 <= min <= max", s.dt_limit)

    if m.attn_layer_idx:
        _positive("model.attn_cfg.num_heads", a.num_heads)
        heads_kv = a.num_heads if a.num_heads_kv is None else a.num_heads_kv
        _require(
            heads_kv > 0 and a.num_heads % heads_kv == 0,
            "model.attn_cfg.num_heads_kv",
            f"a positive divisor of num_heads={a.num_heads}",
            a.num_heads_kv,
        )
        if a.head_dim is None:
            _require(
                m.d_model % a.num_heads == 0,
                "model.attn_cfg.num_heads",
                f"a divisor of d_model={m.d_model} (or set head_dim)",
                a.num_heads,
            )
        head_dim = a.head_dim or m.d_model // a.num_heads
        _require(
            a.rotary_emb_dim % 2 == 0 and a.rotary_emb_dim <= head_dim,
            "model.attn_cfg.rotary_emb_dim",
            f"an even number <= head_dim={head_dim}",
            a.rotary_emb_dim,
        )
    return m


def validate_mamba_vision(m: MambaVisionConfig) -> MambaVisionConfig:
    """Check a MambaVision model section; raise ValueError naming the field (as ``model.<name>``). Returns ``m``."""
    for name in ("dim", "in_dim", "in_chans", "num_classes"):
        _positive(f"model.{name}", getattr(m, name))
    for name in ("depths", "num_heads", "window_size"):
        values = getattr(m, name)
        _require(
            len(values) == 4 and all(isinstance(v, int) and v > 0 for v in values),
            f"model.{name}",
            "a list of 4 positive integers (one per stage)",
            values,
        )
    for stage in (2, 3):
        width, heads = m.dim * 2**stage, m.num_heads[stage]
        _require(
            width % heads == 0,
            "model.num_heads",
            f"stage {stage}'s heads dividing its width dim * 2**{stage} = {width}",
            m.num_heads,
        )
    _require(m.mlp_ratio > 0, "model.mlp_ratio", "a positive number", m.mlp_ratio)
    for name in ("drop_path_rate", "drop_rate", "attn_drop_rate"):
        _require(0 <= getattr(m, name) < 1, f"model.{name}", "in [0, 1)", getattr(m, name))
    _require(m.impl in MODEL_IMPLS, "model.impl", f"one of {MODEL_IMPLS}", m.impl)
    _require(m.compute_dtype in COMPUTE_DTYPES, "model.compute_dtype", f"one of {COMPUTE_DTYPES}", m.compute_dtype)
    _require(m.scan_backend in SCAN_BACKENDS, "model.scan_backend", f"one of {SCAN_BACKENDS}", m.scan_backend)
    return m


def validate_graph_mamba(m: GraphMambaConfig) -> GraphMambaConfig:
    """Check a Graph-Mamba model section; raise ValueError naming the field (as ``model.<name>``). Returns ``m``."""
    for name in ("dim_hidden", "n_layers", "d_state", "d_conv", "expand", "eval_orderings", "num_outputs"):
        _positive(f"model.{name}", getattr(m, name))
    _require(0 <= m.dropout < 1, "model.dropout", "in [0, 1)", m.dropout)
    _require(
        m.node_feature_kind in GRAPH_FEATURE_KINDS,
        "model.node_feature_kind",
        f"one of {GRAPH_FEATURE_KINDS}",
        m.node_feature_kind,
    )
    _require(
        m.edge_feature_kind in GRAPH_EDGE_KINDS,
        "model.edge_feature_kind",
        f"one of {GRAPH_EDGE_KINDS}",
        m.edge_feature_kind,
    )
    for kind, dim, vocab, prefix in (
        (m.node_feature_kind, m.node_in_dim, m.node_vocab, "node"),
        (m.edge_feature_kind, m.edge_in_dim, m.edge_vocab, "edge"),
    ):
        if kind == "dense":
            _positive(f"model.{prefix}_in_dim", dim)
        if kind == "categorical":
            _require(
                len(vocab) > 0 and all(isinstance(v, int) and v > 0 for v in vocab),
                f"model.{prefix}_vocab",
                "a non-empty list of positive cardinalities (one per feature column)",
                vocab,
            )
    _require(0 <= m.lap_pe_dim < m.dim_hidden, "model.lap_pe_dim", f"in [0, dim_hidden={m.dim_hidden})", m.lap_pe_dim)
    if m.lap_pe_dim:
        _positive("model.lap_pe_layers", m.lap_pe_layers)
    _require(m.task_level in GRAPH_TASK_LEVELS, "model.task_level", f"one of {GRAPH_TASK_LEVELS}", m.task_level)
    _require(m.task_type in GRAPH_TASK_TYPES, "model.task_type", f"one of {GRAPH_TASK_TYPES}", m.task_type)
    _require(
        m.task_type != "multiclass" or m.num_outputs >= 2,
        "model.num_outputs",
        "at least 2 classes for a multiclass task",
        m.num_outputs,
    )
    _positive("model.head_layers", m.head_layers)
    _require(
        not m.class_weighted_loss or m.task_type == "multiclass",
        "model.class_weighted_loss",
        "false unless task_type is multiclass",
        m.class_weighted_loss,
    )
    _require(m.impl in MODEL_IMPLS, "model.impl", f"one of {MODEL_IMPLS}", m.impl)
    _require(m.compute_dtype in COMPUTE_DTYPES, "model.compute_dtype", f"one of {COMPUTE_DTYPES}", m.compute_dtype)
    return m


_VALIDATORS = {"lm": validate_model, "mamba_vision": validate_mamba_vision, "graph_mamba": validate_graph_mamba}


def validate(cfg: RunConfig) -> RunConfig:
    """Check the semantic constraints of a whole run; raise ValueError naming the field. Returns ``cfg``."""
    _require(cfg.family in FAMILIES, "family", f"one of {FAMILIES}", cfg.family)
    expected_model = MODEL_CONFIGS[cfg.family]
    _require(isinstance(cfg.model, expected_model), "model", f"a {expected_model.__name__}", type(cfg.model).__name__)
    _VALIDATORS[cfg.family](cfg.model)
    o = cfg.optim
    _require(o.name in OPTIMIZERS, "optim.name", f"one of {OPTIMIZERS}", o.name)
    _require(o.lr > 0, "optim.lr", "a positive float", o.lr)
    _require(0 <= o.min_lr <= o.lr, "optim.min_lr", "in [0, lr]", o.min_lr)
    _require(o.warmup_steps >= 0, "optim.warmup_steps", "an integer >= 0", o.warmup_steps)
    _require(o.weight_decay >= 0, "optim.weight_decay", "a float >= 0", o.weight_decay)
    _require(0 <= o.beta1 < 1 and 0 <= o.beta2 < 1, "optim.beta1/beta2", "in [0, 1)", (o.beta1, o.beta2))
    _require(o.grad_clip >= 0, "optim.grad_clip", "a float >= 0 (0 disables)", o.grad_clip)
    _require(not (o.freeze and o.train_only), "optim.freeze", "empty when optim.train_only is set", o.freeze)
    _require(0 <= o.ema_decay < 1, "optim.ema_decay", "in [0, 1) (0: no average)", o.ema_decay)
    for entry in filter(None, (e.strip() for e in str(o.lr_scale).split(","))):
        pattern, _, scale = entry.partition("=")
        _require(
            bool(pattern.strip()) and _is_positive_float(scale),
            "optim.lr_scale",
            "comma-separated PATTERN=SCALE entries with SCALE > 0 (e.g. 'backbone.*=0.1')",
            o.lr_scale,
        )
    m = cfg.mesh
    _require(isinstance(m.data, int) and m.data >= 0, "mesh.data", "an integer >= 0 (0: the devices left)", m.data)
    _require(isinstance(m.fsdp, int) and m.fsdp >= 1, "mesh.fsdp", "an integer >= 1", m.fsdp)
    _require(isinstance(m.context, int) and m.context >= 1, "mesh.context", "an integer >= 1", m.context)
    _require(m.fsdp_gather in FSDP_GATHER, "mesh.fsdp_gather", f"one of {FSDP_GATHER}", m.fsdp_gather)
    _require(m.grad_reduce in GRAD_REDUCE, "mesh.grad_reduce", f"one of {GRAD_REDUCE}", m.grad_reduce)
    if m.grad_reduce == "early":
        _require(m.fsdp == 1 and m.context == 1, "mesh.grad_reduce", "'xla' unless mesh.fsdp and mesh.context are 1 "
                 "(early reduction is for data-parallel meshes)", m.grad_reduce)  # fmt: skip
    if m.context > 1:
        mixers_ok = cfg.family == "lm" and cfg.model.ssm_cfg.layer == "Mamba2" and not cfg.model.attn_layer_idx
        _require(mixers_ok, "mesh.context", "1 unless the model is a Mamba-2 language model without attention "
                 "layers (context parallelism splits only the SSD's recurrence)", m.context)  # fmt: skip
        per_device = cfg.train.seq_len // m.context
        _require(
            cfg.train.seq_len % m.context == 0 and per_device >= cfg.model.ssm_cfg.d_conv - 1,
            "train.seq_len",
            f"a multiple of mesh.context={m.context} with at least d_conv - 1 positions per device",
            cfg.train.seq_len,
        )

    d = cfg.data
    kinds = DATA_KINDS[cfg.family]
    _require(d.kind in kinds, "data.kind", f"one of {kinds} for family {cfg.family!r}", d.kind)
    path_kind = PATH_DATA_KIND[cfg.family]
    _require(d.kind != path_kind or bool(d.path), "data.path", f"a path when data.kind is {path_kind!r}", d.path)
    _require(0 < d.val_fraction < 1, "data.val_fraction", "in (0, 1)", d.val_fraction)
    _require(d.kind != "tokens" or bool(d.path), "data.path", "a token folder or .bin file for kind 'tokens'", d.path)
    text_kinds = ("stdlib", "text", "tokens")
    _require(
        d.tokenizer is None or d.kind in text_kinds, "data.tokenizer", f"unset unless kind in {text_kinds}", d.tokenizer
    )
    _require(d.token_dtype in TOKEN_DTYPES, "data.token_dtype", f"one of {TOKEN_DTYPES}", d.token_dtype)
    _positive("data.num_symbols", d.num_symbols)
    _positive("data.num_tokens_to_copy", d.num_tokens_to_copy)
    _positive("data.image_size", d.image_size)
    _require(0 < d.crop_pct <= 1, "data.crop_pct", "in (0, 1]", d.crop_pct)
    _require(0 < d.min_scale <= 1, "data.min_scale", "in (0, 1]", d.min_scale)
    _require(0 <= d.hflip <= 1, "data.hflip", "a probability in [0, 1]", d.hflip)
    rand_augment_policy(d.rand_augment)
    _require(0 <= d.random_erase <= 1, "data.random_erase", "a probability in [0, 1]", d.random_erase)
    _require(d.mixup_alpha >= 0, "data.mixup_alpha", "a float >= 0 (0: no mixup)", d.mixup_alpha)
    _require(d.cutmix_alpha >= 0, "data.cutmix_alpha", "a float >= 0 (0: no cutmix)", d.cutmix_alpha)
    _require(0 <= d.mixup_switch_prob <= 1, "data.mixup_switch_prob", "a probability in [0, 1]", d.mixup_switch_prob)
    _require(all(s > 0 for s in d.std), "data.std", "positive per-channel values", d.std)
    _require(d.num_workers >= 0, "data.num_workers", "an integer >= 0 (0: one per CPU core)", d.num_workers)
    _require(d.worker_type in WORKER_TYPES, "data.worker_type", f"one of {WORKER_TYPES}", d.worker_type)
    _positive("data.prefetch", d.prefetch)
    _require(d.bad_images in BAD_IMAGE_POLICIES, "data.bad_images", f"one of {BAD_IMAGE_POLICIES}", d.bad_images)
    _require(d.num_images >= 2, "data.num_images", "an integer >= 2", d.num_images)
    _require(isinstance(d.num_graphs, int) and d.num_graphs >= 2, "data.num_graphs", "an integer >= 2", d.num_graphs)
    _require(
        isinstance(d.lap_pe_freqs, int) and d.lap_pe_freqs >= 0, "data.lap_pe_freqs", "an integer >= 0", d.lap_pe_freqs
    )
    _positive("data.bucket_steps", d.bucket_steps)

    t = cfg.train
    for name in (
        "batch_size",
        "seq_len",
        "max_steps",
        "grad_accum_steps",
        "log_every",
        "eval_every",
        "eval_batches",
        "save_every",
        "keep_checkpoints",
    ):
        _positive(f"train.{name}", getattr(t, name))
    if t.stop_after_steps is not None:
        _positive("train.stop_after_steps", t.stop_after_steps)
    _require(0 <= t.label_smoothing < 1, "train.label_smoothing", "in [0, 1)", t.label_smoothing)
    _require(
        t.init_from is None or (isinstance(t.init_from, str) and t.init_from != ""),
        "train.init_from",
        "a path (a checkpoint folder or file, or a run folder) or null",
        t.init_from,
    )
    _require(isinstance(t.init_from_skip, str), "train.init_from_skip", "comma-separated patterns", t.init_from_skip)
    _require(
        not t.init_from_skip or t.init_from is not None,
        "train.init_from_skip",
        "empty unless train.init_from is set",
        t.init_from_skip,
    )
    _require(
        isinstance(t.loss_chunk_tokens, int) and t.loss_chunk_tokens >= 0,
        "train.loss_chunk_tokens",
        "an integer >= 0 (0: automatic)",
        t.loss_chunk_tokens,
    )
    _require(
        t.label_smoothing == 0 or not getattr(cfg.model, "class_weighted_loss", False),
        "train.label_smoothing",
        "0 with model.class_weighted_loss (the reference's weighted loss has no smoothing)",
        t.label_smoothing,
    )
    return cfg
