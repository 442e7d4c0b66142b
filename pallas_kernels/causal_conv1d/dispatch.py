"""The one place that chooses the causal conv1d's kernels: Pallas Triton (``triton.kernel``, the default) or Mosaic
GPU (``mosaic_gpu.kernel``) where ``ConvConfig.backend`` (both passes) or ``bwd_backend`` (the backward) asks for
it. The Mosaic GPU kernels cover dim a multiple of 128, width at most 9 and no seq_idx, on Hopper, and compiled, no
initial states and L a multiple of their block; a request outside that is refused before any work
(``mosaic_refusal``). The Triton kernels stay the default: on an H200 the Mosaic GPU forward took twice the Triton
one's time and its backward 0.55x (docs/kernels.md#causal-conv1d).

Arguments are channels-last and pre-checked by ``api.causal_conv1d_fn``: x (batch, L, dim); weight (dim, width);
bias (dim,) or None; seq_idx (batch, L) int or None; initial_states (batch, width - 1, dim) or None.
"""

import jax

from pallas_kernels._triton import gpu_has_wgmma, interpret_mode, next_pow2
from pallas_kernels.causal_conv1d.config import ConvConfig
from pallas_kernels.causal_conv1d.mosaic_gpu import kernel as mosaic
from pallas_kernels.causal_conv1d.triton import kernel as triton


def mosaic_refusal(x_shape: tuple, width: int, has_seq_idx: bool, has_initial: bool, config: ConvConfig) -> str | None:
    """Why the Mosaic GPU kernels cannot take these arguments, or None where they can. Compiled for a GPU they also
    refuse initial states and an L that is not a multiple of the block until their GPU tests pass with both: with
    both (batch 2, L 1000, dim 256) the compiled forward missed the reference by 8% (relative L2) on an H200. The
    likely cause is what ``mosaic_gpu.kernel._store_block`` guards against: a partial last block's rows past L stored
    into the next batch row where the tile's rows are whole rows of the array."""
    seqlen, dim = x_shape[1], x_shape[-1]
    if has_seq_idx:
        return "seq_idx (packed sequences) is not covered: use backend='triton'"
    if dim % mosaic.LANES:
        return f"dim must be a multiple of {mosaic.LANES}, got {dim}"
    if width - 1 > mosaic.HALO:
        return f"width must be at most {mosaic.HALO + 1}, got {width}"
    if not gpu_has_wgmma():
        return "the GPU is not a Hopper (compute capability 9.x): use backend='triton'"
    if not interpret_mode():
        block_l = _mosaic_block_l(seqlen, config)
        if seqlen % block_l:
            return f"L must be a multiple of the block ({block_l} steps) when compiled, got {seqlen}"
        if has_initial and width > 1:
            return "initial_states are not covered when compiled: use backend='triton'"
    return None


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
    if config.backward_backend == "mosaic_gpu":
        initial_states = _read_states(weight, initial_states)
        dims = _mosaic_dims(x, weight, bias, initial_states, silu, config, interpret)
        return mosaic.conv_backward(x, weight, bias, initial_states, dout, dims)
    dims = _triton_dims(x, weight, bias, seq_idx, initial_states, silu, config, interpret, bwd=True)
    return triton.conv_backward(x, weight, bias, seq_idx, initial_states, dout, dims, config.bwd_num_warps)
