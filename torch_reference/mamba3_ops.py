"""mamba-ssm's Mamba-3 SISO Triton ops (``mamba3_siso_combined``, ``mamba3_siso_step``) on numpy inputs, for the
parity checks of ``pallas_kernels.mamba3``: inputs float32 numpy in the ops' own layouts (the ops round Q, K, V, Z,
Trap and Angles to bfloat16 themselves), outputs and gradients float32 numpy. GPU only: the ops are Triton kernels.
"""

import numpy as np
import torch

from torch_reference._tensors import to_numpy, to_torch, vjp

STATE_NAMES = ("angle", "ssm", "k", "v")


def _tensors(args: dict, states, grad: bool) -> tuple[dict, tuple | None]:
    tensors = {k: None if v is None else to_torch(v, "float32", "cuda", grad) for k, v in args.items()}
    if states is None:
        return tensors, None
    return tensors, tuple(to_torch(s, "float32", "cuda", grad) for s in states)


def siso_combined(args: dict, states, chunk_size: int, dout: np.ndarray | None = None) -> dict:
    """{"out", "angle", "ssm", "k", "v"} (the final states), and with ``dout`` the gradient of sum(out * dout) by
    every argument ({"d<name>"}, "d input <state>")."""
    from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import mamba3_siso_combined

    tensors, state_tensors = _tensors(args, states, grad=dout is not None)
    out, *finals = mamba3_siso_combined(
        **tensors, Input_States=state_tensors, chunk_size=chunk_size, return_final_states=True
    )
    result = {"out": to_numpy(out), **dict(zip(STATE_NAMES, map(to_numpy, finals), strict=True))}
    if dout is not None:
        leaves = {f"d{k}": v for k, v in tensors.items() if v is not None}
        leaves |= {f"d input {n}": s for n, s in zip(STATE_NAMES, state_tensors or (), strict=False)}
        result |= vjp((out,), (dout,), leaves)
    torch.cuda.synchronize()
    return result


def siso_step(args: dict, states) -> dict:
    """One decoding step: {"out", "angle", "ssm", "k", "v"} (the new states)."""
    from mamba_ssm.ops.triton.mamba3.mamba3_siso_step import mamba3_siso_step

    tensors, state_tensors = _tensors(args, states, grad=False)
    out, new_states = mamba3_siso_step(**tensors, Input_States=state_tensors)
    return {"out": to_numpy(out), **dict(zip(STATE_NAMES, map(to_numpy, new_states), strict=True))}


def round_bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to bfloat16 (as the ops round their inputs), returned as float32."""
    return to_numpy(torch.from_numpy(np.asarray(x, np.float32)).to(torch.bfloat16))
