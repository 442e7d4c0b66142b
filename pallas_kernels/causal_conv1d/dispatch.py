"""The one place that chooses the causal conv1d's kernels, Pallas Triton (``triton.kernel``) or Mosaic GPU
(``mosaic_gpu.kernel``), for each pass (``choose_backends``). The Mosaic GPU kernels cover dim a multiple of 128,
width at most 9 and no seq_idx, on Hopper; ``ConvConfig.backend="auto"`` (the default) takes them, compiled, wherever
they cover the call, and Triton's elsewhere (packed sequences, other dims or GPUs, the interpreter): on an H200 they
ran forward and backward in 0.56x the Triton kernels' time at the 130m, 1.4b, long and 790m shapes, the forward
alone in the same time (docs/kernels.md#causal-conv1d). A request for Mosaic GPU by name that they do not cover is
refused before any work.

Arguments are channels-last and pre-checked by ``api.causal_conv1d_fn``: x (batch, L, dim); weight (dim, width);
bias (dim,) or None; seq_idx (batch, L) int or None; initial_states (batch, width - 1, dim) or None.
"""

import dataclasses

import jax

from pallas_kernels._triton import gpu_has_wgmma, next_pow2
from pallas_kernels.causal_conv1d.config import ConvConfig
from pallas_kernels.causal_conv1d.mosaic_gpu import kernel as mosaic
from pallas_kernels.causal_conv1d.triton import kernel as triton


def mosaic_refusal(x_shape: tuple, width: int, has_seq_idx: bool) -> str | None:
    """Why the Mosaic GPU kernels cannot take these arguments, or None where they can."""
    dim = x_shape[-1]
    if has_seq_idx:
        return "seq_idx (packed sequences) is not covered: use backend='triton'"
    if dim % mosaic.LANES:
        return f"dim must be a multiple of {mosaic.LANES}, got {dim}"
    if width - 1 > mosaic.HALO:
        return f"width must be at most {mosaic.HALO + 1}, got {width}"
    if not gpu_has_wgmma():
        return "the GPU is not a Hopper (compute capability 9.x): use backend='triton'"
    return None


def choose_backends(x_shape: tuple, width: int, has_seq_idx: bool, config: ConvConfig, interpret: bool) -> ConvConfig:
    """``config`` with each pass's backend named ("triton" or "mosaic_gpu"): "auto" becomes Mosaic GPU where
    ``mosaic_refusal`` has nothing against the call and the kernels are compiled, else Triton. Interpreted, "auto"
    stays on Triton: the Mosaic GPU interpreter's host callbacks cannot be differentiated under ``jax.checkpoint``,
    which the models' layers use (the Mosaic kernels' interpret-mode tests ask for them by name). A pass that asks
    for Mosaic GPU by name and is refused raises ValueError naming the field and the reason."""
    refusal = mosaic_refusal(x_shape, width, has_seq_idx)
    field = config.asks_for_mosaic_gpu
    if field and refusal:
        raise ValueError(f"ConvConfig({field}='mosaic_gpu'): {refusal}")
    auto = "triton" if refusal or interpret else "mosaic_gpu"
    forward = auto if config.backend == "auto" else config.backend
    backward = config.bwd_backend or config.backend
    return dataclasses.replace(config, backend=forward, bwd_backend=auto if backward == "auto" else backward)


def _mosaic_block_l(seqlen: int, config: ConvConfig) -> int:
    return min(config.mosaic_block_l, max(8, next_pow2(seqlen)))


def _read_states(weight, initial_states):
    """The initial states where a tap reads them: none at width 1, whose states are (batch, 0, dim)."""
    return None if weight.shape[1] == 1 else initial_states


def _mosaic_dims(x, weight, bias, initial_states, silu: bool, config: ConvConfig, interpret: bool):
    batch, seqlen, dim = x.shape
    block_l = _mosaic_block_l(seqlen, config)
    return mosaic.MosaicConvDims(
        batch=batch,
        seqlen=seqlen,
        dim=dim,
        width=weight.shape[1],
        has_bias=bias is not None,
        has_initial=initial_states is not None,
        silu=silu,
        block_l=block_l,
        block_d=config.mosaic_block_d if dim % config.mosaic_block_d == 0 else mosaic.LANES,
        segment_blocks=config.mosaic_segment_blocks,
        interpret=interpret,
        unroll=min(config.mosaic_unroll, block_l),
    )


def _triton_dims(x, weight, bias, seq_idx, initial_states, silu: bool, config: ConvConfig, interpret: bool, bwd: bool):
    batch, seqlen, dim = x.shape
    block_l, block_d = (config.bwd_block_l, config.bwd_block_d) if bwd else (config.block_l, config.block_d)
    return triton.ConvDims(
        batch=batch,
        seqlen=seqlen,
        dim=dim,
        width=weight.shape[1],
        has_bias=bias is not None,
        has_seq_idx=seq_idx is not None,
        has_initial=initial_states is not None,
        silu=silu,
        block_l=min(block_l, next_pow2(seqlen)),
        block_d=min(block_d, next_pow2(dim)),
        interpret=interpret,
    )


def conv_forward(x, weight, bias, seq_idx, initial_states, silu: bool, config: ConvConfig, interpret: bool):
    """out (batch, L, dim) in x.dtype."""
    if config.backend == "mosaic_gpu":
        initial_states = _read_states(weight, initial_states)
        dims = _mosaic_dims(x, weight, bias, initial_states, silu, config, interpret)
        return mosaic.conv_forward(x, weight, bias, initial_states, dims)
    dims = _triton_dims(x, weight, bias, seq_idx, initial_states, silu, config, interpret, bwd=False)
    return triton.conv_forward(x, weight, bias, seq_idx, initial_states, dims, config.num_warps)


def conv_backward(
    x, weight, bias, seq_idx, initial_states, dout, silu: bool, config: ConvConfig, interpret: bool
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """(dx (batch, L, dim) in x.dtype, dw partials (batch, P, width, dim) float32, dbias partials (batch, P, dim)
    float32 or None): P partials a batch row, summed by the caller in a fixed order."""
    if config.bwd_backend == "mosaic_gpu":
        initial_states = _read_states(weight, initial_states)
        dims = _mosaic_dims(x, weight, bias, initial_states, silu, config, interpret)
        return mosaic.conv_backward(x, weight, bias, initial_states, dout, dims)
    dims = _triton_dims(x, weight, bias, seq_idx, initial_states, silu, config, interpret, bwd=True)
    return triton.conv_backward(x, weight, bias, seq_idx, initial_states, dout, dims, config.bwd_num_warps)
