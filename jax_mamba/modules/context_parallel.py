"""Context parallelism for Mamba-2: a long sequence split over the mesh's ``context`` axis, each device running its
own stretch of positions, with the recurrence carried across devices by the SSD's own state.

Per device, inside ``shard_map`` over the batch axes and ``context``:
- the causal conv first receives the previous device's last width - 1 inputs (``ppermute``; the first device gets
  zeros, the sequence's own causal padding) and reads them as its initial states, in place (no copy of the
  stretch with them in front);
- each device computes the final state of its stretch from a zero state (``ssd_final_state``'s contraction over
  time per head, no outputs; dt processed once for it and for the stretch's total decay); the devices exchange
  those final states and total decays (``all_gather``: (H, P, N) and (H,) per row, not activations); device k's
  incoming state is sum over j < k of exp(sum of the log-decays of the devices between them) x final state j; the
  SSD then runs from that incoming state (``initial_states``), which gives exactly the unsplit sequence's outputs.
Gradients flow through the scan, the final states and the collectives (JAX transposes them). The final states cost
about one read of x and B (and their gradients two GEMMs) where a second scan, forward and backward, did before."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import PartitionSpec as P

from jax_mamba.modules.per_device import batch_spec, context_size
from pallas_kernels.ssd.api import SAVED_STATES_NAME
from pallas_kernels.ssd.reference import final_state, process_dt

CONTEXT_AXIS = "context"


def causal_conv_across_context(conv: Callable, x: jax.Array, weight: jax.Array, bias: jax.Array | None):
    """``conv(x, weight, bias, initial_states=...)`` (depthwise causal, x (batch, L, channels), initial states
    (batch, width - 1, channels)) with L split over ``context``."""
    n, width = context_size(), weight.shape[1]

    def local(x, weight, bias):
        halo = x[:, x.shape[1] - (width - 1) :]
        previous = jax.lax.ppermute(halo, CONTEXT_AXIS, [(i, i + 1) for i in range(n - 1)])
        return conv(x, weight, bias, initial_states=previous)

    if bias is None:
        return jax.shard_map(
            lambda x, w: local(x, w, None), in_specs=(batch_spec(), P()), out_specs=batch_spec(),
            check_vma=False,
        )(x, weight)  # fmt: skip
    spec = batch_spec()
    return jax.shard_map(local, in_specs=(spec, P(), P()), out_specs=spec, check_vma=False)(x, weight, bias)


def ssd_across_context(scan: Callable, x, dt, A, B, C, D, z, dt_bias, dt_limit: tuple[float, float]) -> jax.Array:
    """The SSD over x (batch, L, H, P) with L split over ``context``. ``scan(x, dt, A, B, C, D, z, dt_bias,
    initial_states)`` is the layer's own call (dt_softplus on, dt clamped to ``dt_limit``)."""
    n = context_size()
    seq, rep = batch_spec(), P()
    args = (x, dt, A, B, C, D, z, dt_bias)
    specs = (seq, seq, rep, seq, seq, rep, seq, rep)
    present = [i for i, a in enumerate(args) if a is not None]

    def local(*values):
        full = list(args)
        for i, v in zip(present, values, strict=True):
            full[i] = v
        x, dt, A, B, C, D, z, dt_bias = full
        processed = process_dt(dt, dt_bias, True, dt_limit)  # (batch, L, H) float32, as the layer's scan takes it
        final = final_state(x, processed, A, B)  # ssd_final_state's math: the layer has checked the inputs
        log_decay = jnp.sum(processed, axis=1) * A  # (batch, H)
        finals = jax.lax.all_gather(final, CONTEXT_AXIS)  # (n, batch, H, P, N)
        ends = jnp.cumsum(jax.lax.all_gather(log_decay, CONTEXT_AXIS), axis=0)  # ends[i]: decay through device i
        k = jax.lax.axis_index(CONTEXT_AXIS)
        before = (jnp.arange(n) < k)[:, None, None]
        exponent = jnp.where(before, ends[jnp.maximum(k - 1, 0)][None] - ends, -jnp.inf)  # devices j < i < k
        incoming = jnp.einsum("jbh,jbhpn->bhpn", jnp.exp(exponent), finals)
        incoming = checkpoint_name(incoming, SAVED_STATES_NAME)  # kept by the layer's remat: not recomputed
        return scan(x, dt, A, B, C, D, z, dt_bias, incoming)

    in_specs = tuple(specs[i] for i in present)
    return jax.shard_map(local, in_specs=in_specs, out_specs=seq, check_vma=False)(*(args[i] for i in present))
