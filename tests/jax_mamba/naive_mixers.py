"""float64 NumPy forward passes of mamba-ssm's Mamba, Mamba2 and Mamba3 mixers, written from mamba-ssm's slow paths
on top of the op oracles, reading parameters by their mamba-ssm names. They check the modules' wiring (split
orders, where biases enter, gating) independently of the module code."""

import numpy as np

from tests.pallas_kernels import naive, naive_mamba3


def _linear(x, p, name):
    out = x @ p[f"{name}.kernel"]
    return out + p[f"{name}.bias"] if f"{name}.bias" in p else out


def mamba1(p: dict, hidden: np.ndarray, d_state: int, dt_rank: int) -> np.ndarray:
    d_inner = p["D"].shape[0]
    xz = _linear(hidden, p, "in_proj")
    x, z = xz[..., :d_inner], xz[..., d_inner:]
    x, _ = naive.conv_forward(x, p["conv1d.weight"], p.get("conv1d.bias"), silu_act=True)
    x_dbl = x @ p["x_proj.kernel"]
    dt, B, C = x_dbl[..., :dt_rank], x_dbl[..., dt_rank : dt_rank + d_state], x_dbl[..., dt_rank + d_state :]
    delta = naive.softplus(dt @ p["dt_proj.kernel"] + p["dt_proj.bias"])
    expand = lambda t: np.broadcast_to(t[:, :, None, :], (*t.shape[:2], d_inner, d_state))  # noqa: E731
    y, _, _ = naive.scan_forward(x, delta, -np.exp(p["A_log"]), expand(B), expand(C), p["D"], z)
    return _linear(y, p, "out_proj")


def mamba2(
    p: dict,
    hidden: np.ndarray,
    *,
    d_state: int,
    headdim: int,
    ngroups: int,
    d_ssm: int,
    norm_before_gate: bool = False,
    dt_limit=(0.0, np.inf),
) -> np.ndarray:
    d_inner = p["out_proj.kernel"].shape[0]
    d_mlp = d_inner - d_ssm
    gn = ngroups * d_state
    zxbcdt = _linear(hidden, p, "in_proj")
    cuts = np.cumsum([d_mlp, d_mlp, d_ssm, d_ssm + 2 * gn])
    z0, x0, z, xbc, dt = np.split(zxbcdt, cuts, axis=-1)
    xbc, _ = naive.conv_forward(xbc, p["conv1d.weight"], p.get("conv1d.bias"), silu_act=True)
    x, B, C = np.split(xbc, [d_ssm, d_ssm + gn], axis=-1)
    batch, seqlen = x.shape[:2]
    dt = np.clip(naive.softplus(dt + p["dt_bias"]), *dt_limit)
    groups = lambda t: naive.expand_groups(t.reshape(batch, seqlen, ngroups, d_state), d_ssm)  # noqa: E731
    A = np.repeat(-np.exp(p["A_log"]), headdim)[:, None] * np.ones((1, d_state))
    D = p["D"] if p["D"].shape[0] == d_ssm else np.repeat(p["D"], headdim)
    y, _, _ = naive.scan_forward(x, np.repeat(dt, headdim, axis=2), A, groups(B), groups(C), D)
    y = naive.rmsnorm_forward(
        y, p["norm.weight"], z=z, eps=1e-5, group_size=d_ssm // ngroups, norm_before_gate=norm_before_gate
    )
    if d_mlp > 0:
        y = np.concatenate([naive.silu(z0) * x0, y], axis=-1)
    return _linear(y, p, "out_proj")


def _rms(x, weight, eps=1e-5):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def a_activation(name: str, x: np.ndarray) -> np.ndarray:
    """Mamba-3's A = -f(dd_A): softplus (mamba-ssm 2.3.2.post1) or the heavy tail (1 + x, 1 / (1 - x) below 0)."""
    if name == "softplus":
        return naive.softplus(x)
    return np.where(x >= 0, 1.0 + x, 1.0 / (1.0 - np.minimum(x, 0.0)))


def mamba3(
    p: dict,
    hidden: np.ndarray,
    *,
    d_state: int,
    headdim: int,
    ngroups: int,
    angles: int,
    A_floor=1e-4,
    activation: str = "softplus",
):
    """mamba-ssm's ``Mamba3.forward`` (SISO) on top of the Mamba-3 oracle."""
    d_inner = p["out_proj.kernel"].shape[0]
    heads = d_inner // headdim
    gn = ngroups * d_state
    batch, seqlen = hidden.shape[:2]
    cuts = np.cumsum([d_inner, d_inner, gn, gn, heads, heads, heads])
    z, x, B, C, dd_dt, dd_A, trap, ang = np.split(_linear(hidden, p, "in_proj"), cuts, axis=-1)
    assert ang.shape[-1] == angles
    A = np.minimum(-a_activation(activation, dd_A), -A_floor)
    dt = naive.softplus(dd_dt + p["dt_bias"])
    by_head = lambda t: np.swapaxes(t, 1, 2)  # noqa: E731
    groups = (batch, seqlen, ngroups, d_state)
    y, _ = naive_mamba3.mamba3_forward(
        _rms(C.reshape(groups), p["C_norm.weight"]),
        _rms(B.reshape(groups), p["B_norm.weight"]),
        x.reshape(batch, seqlen, heads, headdim),
        by_head(A * dt),
        by_head(dt),
        by_head(trap),
        p["C_bias"][:, 0],
        p["B_bias"][:, 0],
        np.broadcast_to(ang[:, :, None, :], (batch, seqlen, heads, angles)),
        D=p["D"],
        Z=None if "norm.weight" in p else z.reshape(batch, seqlen, heads, headdim),
    )
    y = y.reshape(batch, seqlen, d_inner)
    if "norm.weight" in p:
        y = naive.rmsnorm_forward(y, p["norm.weight"], z=z, eps=1e-5, group_size=headdim, norm_before_gate=True)
    return _linear(y, p, "out_proj")


def mamba3_mimo(
    p: dict,
    hidden: np.ndarray,
    *,
    d_state: int,
    headdim: int,
    ngroups: int,
    rank: int,
    angles: int,
    activation: str = "softplus",
):
    """mamba-ssm's ``Mamba3.forward`` with ``is_mimo`` on top of the MIMO oracle: B and C per rank (rank outermost in
    in_proj's output), the ranks summed by mimo_o inside the op, or normed and gated per rank (z mimo_z_r) first."""
    d_inner = p["out_proj.kernel"].shape[0]
    heads = d_inner // headdim
    rgn = rank * ngroups * d_state
    batch, seqlen = hidden.shape[:2]
    cuts = np.cumsum([d_inner, d_inner, rgn, rgn, heads, heads, heads])
    z, x, B, C, dd_dt, dd_A, trap, ang = np.split(_linear(hidden, p, "in_proj"), cuts, axis=-1)
    assert ang.shape[-1] == angles
    A = np.minimum(-a_activation(activation, dd_A), -1e-4)
    dt = naive.softplus(dd_dt + p["dt_bias"])
    by_head = lambda t: np.swapaxes(t, 1, 2)  # noqa: E731
    per_rank = (batch, seqlen, rank, ngroups, d_state)
    normed = "norm.weight" in p
    z = z.reshape(batch, seqlen, heads, headdim)
    y, _ = naive_mamba3.mamba3_mimo_forward(
        _rms(C.reshape(per_rank), p["C_norm.weight"]),
        _rms(B.reshape(per_rank), p["B_norm.weight"]),
        x.reshape(batch, seqlen, heads, headdim),
        by_head(A * dt),
        by_head(dt),
        by_head(trap),
        p["C_bias"],
        p["B_bias"],
        p["mimo_x"],
        p["mimo_z"],
        None if normed else p["mimo_o"],
        np.broadcast_to(ang[:, :, None, :], (batch, seqlen, heads, angles)),
        D=p["D"],
        Z=None if normed else z,
    )
    if normed:
        flat = (batch, seqlen, d_inner)
        parts = []
        for r in range(rank):
            gate = (z * p["mimo_z"][:, r]).reshape(flat)
            one = naive.rmsnorm_forward(
                y[:, :, r].reshape(flat), p["norm.weight"], z=gate, eps=1e-5, group_size=headdim, norm_before_gate=True
            )
            parts.append(one * p["mimo_o"][:, r].reshape(d_inner))
        y = sum(parts)
    return _linear(y.reshape(batch, seqlen, d_inner), p, "out_proj")
