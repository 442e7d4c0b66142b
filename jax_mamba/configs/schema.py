"""Configuration dataclasses. ``ModelConfig`` mirrors mamba-ssm's ``MambaConfig`` (``ssm_cfg``/``attn_cfg`` as
typed sections) so that configs convert field by field; the rest describe a training run.

``validate`` checks a whole ``RunConfig`` and raises ``ValueError`` naming the offending field by its dotted path.
"""

import math
from dataclasses import dataclass, field

MODEL_IMPLS = ("auto", "reference", "pallas")  # what each means: jax_mamba.modules.impl

SSM_LAYERS = ("Mamba1", "Mamba2")
COMPUTE_DTYPES = ("auto", "float32", "bfloat16")
DATA_KINDS = ("stdlib", "text", "selective_copying", "induction_heads")


@dataclass
class SSMConfig:
    """mamba-ssm's ``ssm_cfg``: the arguments of ``Mamba`` (layer Mamba1) or ``Mamba2`` (layer Mamba2)."""

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
    """Architecture (mamba-ssm's MambaConfig fields) plus how to run it (impl, compute_dtype, remat)."""

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

    def padded_vocab_size(self) -> int:
        multiple = self.pad_vocab_size_multiple
        return -(-self.vocab_size // multiple) * multiple


@dataclass
class OptimConfig:
    """AdamW with linear warmup then cosine decay to ``min_lr``, global-norm clipping (the Mamba paper's recipe)."""

    lr: float = 1e-3
    min_lr: float = 1e-5
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0  # 0 disables clipping


@dataclass
class DataConfig:
    """Where batches come from. ``stdlib``: byte-level Python standard library sources (embedded default);
    ``text``: a user's text file or folder (bytes); ``selective_copying``/``induction_heads``: the Mamba paper's
    synthetic tasks, scored by accuracy."""

    kind: str = "stdlib"
    path: str | None = None
    val_fraction: float = 0.05
    num_symbols: int = 16  # synthetic tasks: distinct data tokens
    num_tokens_to_copy: int = 16  # selective copying: tokens to memorize


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
    keep_checkpoints: int = 3
    run_dir: str | None = None  # None: runs/<config name>/<timestamp>
    stop_after_steps: int | None = None  # end this invocation early (preemptible jobs); continue with --resume
    progress: bool = True  # progress bar on stderr


@dataclass
class RunConfig:
    name: str = "custom"
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


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


def validate(cfg: RunConfig) -> RunConfig:
    """Check the semantic constraints of a whole run; raise ValueError naming the field. Returns ``cfg``."""
    validate_model(cfg.model)
    o = cfg.optim
    _require(o.lr > 0, "optim.lr", "a positive float", o.lr)
    _require(0 <= o.min_lr <= o.lr, "optim.min_lr", "in [0, lr]", o.min_lr)
    _require(o.warmup_steps >= 0, "optim.warmup_steps", "an integer >= 0", o.warmup_steps)
    _require(o.weight_decay >= 0, "optim.weight_decay", "a float >= 0", o.weight_decay)
    _require(0 <= o.beta1 < 1 and 0 <= o.beta2 < 1, "optim.beta1/beta2", "in [0, 1)", (o.beta1, o.beta2))
    _require(o.grad_clip >= 0, "optim.grad_clip", "a float >= 0 (0 disables)", o.grad_clip)

    d = cfg.data
    _require(d.kind in DATA_KINDS, "data.kind", f"one of {DATA_KINDS}", d.kind)
    _require(d.kind != "text" or bool(d.path), "data.path", "a file or folder when data.kind is 'text'", d.path)
    _require(0 < d.val_fraction < 1, "data.val_fraction", "in (0, 1)", d.val_fraction)
    _positive("data.num_symbols", d.num_symbols)
    _positive("data.num_tokens_to_copy", d.num_tokens_to_copy)

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
    return cfg
