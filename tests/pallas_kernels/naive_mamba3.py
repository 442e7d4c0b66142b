"""Float64 NumPy oracle of Mamba-3's SISO mixer, a loop over steps written from the recurrence (per batch row and
head; the equations are in ``pallas_kernels/mamba3/reference.py``'s docstring), independent of the chunked form."""

import numpy as np

from tests.pallas_kernels.naive import sigmoid, silu


def rotate(x, theta):
    """x (N,) with its pairs (2j, 2j + 1), j < len(theta), turned by theta."""
    out = x.copy()
    for j, angle in enumerate(theta):
        a, b = x[2 * j], x[2 * j + 1]
        out[2 * j], out[2 * j + 1] = a * np.cos(angle) - b * np.sin(angle), a * np.sin(angle) + b * np.cos(angle)
    return out


def mamba3_forward(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, states=None):
    """out (batch, L, H, P) and the final (angle mod 2 pi, ssm, k, v); layouts as ``mamba3_siso_combined``'s."""
    batch, seqlen, heads, headdim = V.shape
    groups, dstate, pairs = Q.shape[2], Q.shape[3], Angles.shape[-1]
    out = np.zeros(V.shape)
    finals = (np.zeros((batch, heads, pairs)), np.zeros((batch, heads, headdim, dstate)))
    finals += (np.zeros((batch, heads, dstate)), np.zeros((batch, heads, headdim)))
    for b in range(batch):
        for h in range(heads):
            g = h // (heads // groups)
            if states is None:
                theta, S = np.zeros(pairs), np.zeros((headdim, dstate))
                k_prev, v_prev = np.zeros(dstate), np.zeros(headdim)
            else:
                theta, S, k_prev, v_prev = (np.array(s[b, h], np.float64) for s in states)
            for t in range(seqlen):
                dt, sigma, alpha = DT[b, h, t], sigmoid(Trap[b, h, t]), np.exp(ADT[b, h, t])
                theta = theta + np.pi * np.tanh(Angles[b, t, h]) * dt
                q = rotate(Q[b, t, g] + Q_bias[h], theta)
                k = rotate(K[b, t, g] + K_bias[h], theta)
                v = V[b, t, h]
                S = alpha * S + alpha * dt * (1 - sigma) * np.outer(v_prev, k_prev) + dt * sigma * np.outer(v, k)
                o = S @ q + (0.0 if D is None else D[h]) * v
                out[b, t, h] = o if Z is None else o * silu(Z[b, t, h])
                k_prev, v_prev = k, v
            for final, value in zip(finals, (np.mod(theta, 2 * np.pi), S, k_prev, v_prev), strict=True):
                final[b, h] = value
    return out, finals


def rotate_halves(x, theta):
    """x (N,) with its pairs (j, j + N / 2), j < len(theta), turned by theta (MIMO)."""
    out, half = x.copy(), len(x) // 2
    for j, angle in enumerate(theta):
        a, b = x[j], x[j + half]
        out[j], out[j + half] = a * np.cos(angle) - b * np.sin(angle), a * np.sin(angle) + b * np.cos(angle)
    return out


def mamba3_mimo_forward(
    Q, K, V, ADT, DT, Trap, Q_bias, K_bias, MIMO_V, MIMO_Z, MIMO_Out, Angles, D=None, Z=None, states=None
):
    """out (batch, L, H, P), or (batch, L, R, H, P) without MIMO_Out, and the final (angle mod 2 pi, ssm, k (batch,
    R, H, N), v); layouts as ``mamba3_mimo``'s. One state a head, a rank-R update a step."""
    batch, seqlen, heads, headdim = V.shape
    rank, groups, dstate, pairs = Q.shape[2], Q.shape[3], Q.shape[4], Angles.shape[-1]
    out = np.zeros((batch, seqlen, rank, heads, headdim))
    finals = (np.zeros((batch, heads, pairs)), np.zeros((batch, heads, headdim, dstate)))
    finals += (np.zeros((batch, rank, heads, dstate)), np.zeros((batch, heads, headdim)))
    for b in range(batch):
        for h in range(heads):
            g = h // (heads // groups)
            if states is None:
                theta, S = np.zeros(pairs), np.zeros((headdim, dstate))
                k_prev, v_prev = np.zeros((rank, dstate)), np.zeros(headdim)
            else:
                theta, S, v_prev = (np.array(s[b, h], np.float64) for s in (states[0], states[1], states[3]))
                k_prev = np.array(states[2][b, :, h], np.float64)
            for t in range(seqlen):
                dt, sigma, alpha = DT[b, h, t], sigmoid(Trap[b, h, t]), np.exp(ADT[b, h, t])
                theta = theta + np.pi * np.tanh(Angles[b, t, h]) * dt
                q = [rotate_halves(Q[b, t, r, g] + Q_bias[h, r], theta) for r in range(rank)]
                k = [rotate_halves(K[b, t, r, g] + K_bias[h, r], theta) for r in range(rank)]
                v = V[b, t, h]
                S = alpha * S
                for r in range(rank):
                    S = S + alpha * dt * (1 - sigma) * np.outer(MIMO_V[h, r] * v_prev, k_prev[r])
                    S = S + dt * sigma * np.outer(MIMO_V[h, r] * v, k[r])
                for r in range(rank):
                    o = S @ q[r] + (0.0 if D is None else D[h]) * MIMO_V[h, r] * v
                    out[b, t, r, h] = o if Z is None else o * silu(Z[b, t, h] * MIMO_Z[h, r])
                k_prev, v_prev = np.array(k), v
            finals[0][b, h], finals[1][b, h], finals[3][b, h] = np.mod(theta, 2 * np.pi), S, v_prev
            finals[2][b, :, h] = k_prev
    if MIMO_Out is not None:
        out = np.einsum("blrhp,hrp->blhp", out, MIMO_Out)
    return out, finals
