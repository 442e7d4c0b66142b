"""Which operator class a GPU kernel's time belongs to, for the characterization reports (the seed paper's Fig. 1
categories), from one table of rules shared by both frameworks' traces.

A kernel is named by its launcher: cuBLAS/cuBLASLt (``sm90_xmma_gemm_*``, ``nvjet_*``), CUTLASS, cuDNN
(``*_fprop_implicit_gemm*``, ``*sdpa*``), our Pallas kernels (``pallas_call(name=)``: ``selective_scan_fwd``,
``ssd_bwd_dx``, ...), mamba-ssm's CUDA and Triton kernels (``selective_scan_fwd_kernel``, ``_chunk_scan_fwd_kernel``),
PyTorch's ATen kernels (demangled C++ names: ``at::native::vectorized_elementwise_kernel<...>``) and XLA's
fusions (``loop_add_fusion_3``, ``input_reduce_fusion_7``, ``gemm_fusion_dot_general_2``). XLA's generic fusions
say little by name, so for them the op's name scope (``jax.named_scope``, e.g. ``.../batch_norm/...``) is read
first. The first matching rule wins; a kernel no rule matches is ``UNCLASSIFIED`` and reported as such."""

import re

CATEGORIES = (
    "GEMM",
    "SSM",
    "attention",
    "convolution",
    "normalization",
    "elementwise/fusion",
    "reduction",
    "optimizer",
    "copy/other",
)
UNCLASSIFIED = "unclassified"

# Kernels whose names say what they are (all launchers): checked first, in this order.
NAME_RULES: tuple[tuple[str, str], ...] = (
    ("optimizer", r"multi_tensor_apply|fused_?adam|adamw|lamb_"),
    (
        "SSM",
        r"selective_scan|selective_state_update|ssd_|chunk_scan|chunk_state|state_passing|bmm_chunk|chunk_cumsum",
    ),
    ("attention", r"flash_?(fwd|bwd|attn)|fmha|sdpa|_attention_|attn_fwd|attn_bwd"),
    ("convolution", r"causal_conv1d|conv[123]d|convolution|fprop|dgrad|wgrad"),
    ("GEMM", r"gemm|xmma|cutlass|nvjet|cublas|s16816|s1688|wgmma|dot_general|matmul|sgemm|hgemm"),
    ("normalization", r"layer_?norm|rms_?norm|batch_?norm|group_?norm|_norm_(fwd|bwd)|welford|cuComputeGrad"),
)

# XLA's generic fusions (``loop_*``, ``input_*``, ``*_fusion*``): the op's name scope, if one matches, decides.
SCOPE_RULES: tuple[tuple[str, str], ...] = (
    ("optimizer", r"optimizer|adam|apply_updates|opt_update"),
    ("SSM", r"selective_scan|ssd"),
    ("attention", r"attention|/attn/"),
    ("convolution", r"conv(?!ert)"),  # not convert_element_type
    ("normalization", r"norm(?!al)"),  # not random normal
)
GENERIC_XLA = r"^(loop|input)_|_fusion(_\d+)?$|^fusion"

# What is left, by the kind of work the name shows.
KIND_RULES: tuple[tuple[str, str], ...] = (
    ("reduction", r"reduce|reduction|scatter|segment|cumsum|softmax|argmax"),
    (
        "copy/other",
        r"memcpy|memset|copy|transpose|concatenate|gather|index_?select|nccl|embedding|dynamic|sort|slice",
    ),
    ("elementwise/fusion", r"elementwise|fusion|^loop_|vectorized|unrolled|triton_(poi|red|per)"),
)


def _first(rules: tuple[tuple[str, str], ...], text: str) -> str | None:
    return next((category for category, pattern in rules if re.search(pattern, text, re.IGNORECASE)), None)


def classify(kernel: str, scope: str = "") -> str:
    """The category (one of ``CATEGORIES``, or ``UNCLASSIFIED``) of a kernel named ``kernel``; ``scope`` is its
    op's name scope where the trace knows it (XLA fusions), else empty."""
    category = _first(NAME_RULES, kernel)
    if category is None and scope and re.search(GENERIC_XLA, kernel):
        category = _first(SCOPE_RULES, scope)
    return category or _first(KIND_RULES, kernel) or UNCLASSIFIED


def breakdown(kernel_us: dict[str, float], scopes: dict[str, str] | None = None) -> dict[str, float]:
    """Kernel -> time (any unit) summed by category, every category present (0 where none), the unclassified share
    under ``UNCLASSIFIED``, never dropped."""
    totals = dict.fromkeys((*CATEGORIES, UNCLASSIFIED), 0.0)
    for kernel, time in kernel_us.items():
        totals[classify(kernel, (scopes or {}).get(kernel, ""))] += time
    return totals
