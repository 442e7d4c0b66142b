"""Independent float64 NumPy oracles: sequential loops written from the recurrences, with hand-derived backward
passes (adjoint recurrences), so gradients are checked against math, not against another autodiff.

One general diagonal recurrence serves both SSMs. Per batch row and channel d (state size N):
    h_t = keep_t * exp(delta_t A_d) h_{t-1} + delta_t u_t B_t,   y_t = <C_t, h_t> + D_d u_t,   out_t = y_t silu(z_t)
where keep_t = 0 resets the state (packed sequences). Mamba-1 is this with per-channel A; Mamba-2 (SSD) is this
with dim = H * P channels, A and delta shared by the P channels of a head.
"""

from dataclasses import dataclass

import numpy as np


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def dsilu(x):
    s = sigmoid(x)
    return s * (1.0 + x * (1.0 - s))


def softplus(x):
    return np.logaddexp(x, 0.0)


@dataclass
class ScanGrads:
    u: np.ndarray
    delta: np.ndarray
    A: np.ndarray
    A_steps: np.ndarray  # (b, L, d, n): each position's term of A (A is their sum over b and L)
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray | None
    z: np.ndarray | None
    h0: np.ndarray


def scan_forward(u, delta, A, B, C, D=None, z=None, h0=None, keep=None):
    """u, delta, z (b, L, d); A (d, n); B, C (b, L, d, n) per channel; D (d,); h0 (b, d, n); keep (b, L) in {0, 1}.

    Returns (out (b, L, d), last state (b, d, n), states (L + 1, b, d, n) with states[0] = h0).
    """
    b, length, d = u.shape
    n = A.shape[1]
    h = np.zeros((b, d, n)) if h0 is None else h0.copy()
    keep = np.ones((b, length)) if keep is None else keep
    states = [h]
    y = np.zeros((b, length, d))
    for t in range(length):
        decay = np.exp(delta[:, t, :, None] * A) * keep[:, t, None, None]
        h = decay * h + (delta[:, t] * u[:, t])[..., None] * B[:, t]
        states.append(h)
        y[:, t] = np.sum(h * C[:, t], axis=-1)
    if D is not None:
        y = y + u * D
    out = y if z is None else y * silu(z)
    return out, h, np.stack(states)


def scan_backward(dout, dlast, u, delta, A, B, C, D=None, z=None, h0=None, keep=None) -> ScanGrads:
    """Adjoint of :func:`scan_forward` for output cotangent ``dout`` and last-state cotangent ``dlast``."""
    b, length = u.shape[:2]
    keep = np.ones((b, length)) if keep is None else keep
    _, _, states = scan_forward(u, delta, A, B, C, D, z, h0, keep)
    y = np.einsum("tbdn,btdn->btd", states[1:], C) + (0.0 if D is None else u * D)
    dz = None if z is None else dout * y * dsilu(z)
    dy = dout if z is None else dout * silu(z)
    dD = None if D is None else np.sum(dy * u, axis=(0, 1))
    du = np.zeros_like(u) if D is None else dy * D
    ddelta = np.zeros_like(delta)
    dA_steps = np.zeros((b, length, *A.shape))
    dB = np.zeros_like(B)
    dC = np.zeros_like(C)
    g = dlast.copy()  # cotangent of h_t, walking t backwards
    for t in reversed(range(length)):
        g = g + dy[:, t, :, None] * C[:, t]
        dC[:, t] = dy[:, t, :, None] * states[t + 1]
        decay = np.exp(delta[:, t, :, None] * A) * keep[:, t, None, None]
        dB[:, t] = g * (delta[:, t] * u[:, t])[..., None]
        du[:, t] += np.sum(g * B[:, t], axis=-1) * delta[:, t]
        ddelta[:, t] = np.sum(g * (u[:, t, :, None] * B[:, t] + decay * A * states[t]), axis=-1)
        dA_steps[:, t] = g * decay * delta[:, t, :, None] * states[t]
        g = g * decay
    dA = dA_steps.sum(axis=(0, 1))
    return ScanGrads(u=du, delta=ddelta, A=dA, A_steps=dA_steps, B=dB, C=dC, D=dD, z=dz, h0=g)


def expand_groups(x, dim):
    """(b, L, G, n) -> (b, L, dim, n): channel c reads group c // (dim // G)."""
    return np.repeat(x, dim // x.shape[2], axis=2)


def reduce_groups(dx, groups):
    """Adjoint of :func:`expand_groups`: (b, L, dim, n) -> (b, L, G, n)."""
    b, length, dim, n = dx.shape
    return dx.reshape(b, length, groups, dim // groups, n).sum(axis=3)


def _same_sequence(seq_idx, batch, s, t):
    """(b,) 1.0 where input position s may feed output t: s >= 0 and, with seq_idx, the same sequence."""
    if seq_idx is None:
        return np.ones(batch)
    return np.array([s >= 0 and seq_idx[i, s] == seq_idx[i, t] for i in range(batch)], float)


def conv_forward(x, weight, bias=None, seq_idx=None, initial=None, silu_act=False):
    """Depthwise causal conv, loops over taps. x (b, L, d); weight (d, w); initial (b, w - 1, d).

    Returns (out, pre-activation). Without seq_idx, taps before the start read ``initial`` (zeros if None)."""
    b, length, d = x.shape
    w = weight.shape[1]
    xp = np.concatenate([np.zeros((b, w - 1, d)) if initial is None else initial, x], axis=1)
    pre = np.zeros((b, length, d)) + (0.0 if bias is None else bias)
    for t in range(length):
        for k in range(w):
            same = _same_sequence(seq_idx, b, t - (w - 1) + k, t)
            pre[:, t] += same[:, None] * xp[:, t + k] * weight[:, k]
    return (silu(pre) if silu_act else pre), pre


def conv_backward(dout, x, weight, bias=None, seq_idx=None, initial=None, silu_act=False):
    """Adjoint of :func:`conv_forward`: returns (dx, dweight, dbias, dinitial)."""
    b, length, d = x.shape
    w = weight.shape[1]
    _, pre = conv_forward(x, weight, bias, seq_idx, initial, silu_act)
    dpre = dout * dsilu(pre) if silu_act else dout
    xp = np.concatenate([np.zeros((b, w - 1, d)) if initial is None else initial, x], axis=1)
    dxp = np.zeros_like(xp)
    dweight = np.zeros_like(weight)
    for t in range(length):
        for k in range(w):
            same = _same_sequence(seq_idx, b, t - (w - 1) + k, t)
            dxp[:, t + k] += same[:, None] * dpre[:, t] * weight[:, k]
            dweight[:, k] += np.sum(same[:, None] * dpre[:, t] * xp[:, t + k], axis=0)
    dbias = None if bias is None else dpre.sum(axis=(0, 1))
    return dxp[:, w - 1 :], dweight, dbias, dxp[:, : w - 1]


def rmsnorm_forward(x, weight, bias=None, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    """Gated RMSNorm over the last axis, groups of ``group_size`` channels, written out step by step."""
    d = x.shape[-1]
    g = d if group_size is None else group_size
    h = x * silu(z) if (z is not None and not norm_before_gate) else x
    out = np.empty_like(h)
    for start in range(0, d, g):
        part = h[..., start : start + g]
        out[..., start : start + g] = part / np.sqrt(np.mean(part * part, axis=-1, keepdims=True) + eps)
    out = out * weight + (0.0 if bias is None else bias)
    if z is not None and norm_before_gate:
        out = out * silu(z)
    return out


def numeric_grad(f, x, dout, eps=1e-6):
    """Central-difference gradient of sum(f(x) * dout) with respect to x (float64, every element)."""
    grad = np.zeros_like(x)
    flat = x.reshape(-1)
    gflat = grad.reshape(-1)
    for i in range(flat.size):
        orig = flat[i]
        flat[i] = orig + eps
        plus = np.sum(f(x) * dout)
        flat[i] = orig - eps
        minus = np.sum(f(x) * dout)
        flat[i] = orig
        gflat[i] = (plus - minus) / (2 * eps)
    return grad
