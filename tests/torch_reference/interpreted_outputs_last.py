"""Run under ``TRITON_INTERPRET=1`` (Triton's CPU interpreter) by test_triton_outputs_last: mamba-ssm's chunk
cumsum kernel, which takes its two outputs mid-list, launched as itself and through ``outputs_last`` with the same
random inputs and NaN-poisoned outputs. Prints one JSON line: per output, whether the two matched exactly and whether
the wrapped launch left NaN. (The interpreter cannot run the kernels that loop over a runtime count.)"""

import json
import math
import os
import sys

import torch
import triton

from torch_reference.backend import load


def cumsum_case(kernel, gen) -> dict:
    batch, seqlen, nheads, chunk = 2, 7, 3, 4  # seqlen not a multiple of the chunk
    nchunks = math.ceil(seqlen / chunk)
    dt, A, bias = (
        torch.rand(batch, seqlen, nheads, generator=gen),
        -torch.rand(nheads, generator=gen),
        torch.rand(nheads, generator=gen),
    )
    dt_out = torch.full((batch, nheads, nchunks, chunk), float("nan"))
    dA = torch.full_like(dt_out, float("nan"))
    args = dict(
        dt_ptr=dt, A_ptr=A, dt_bias_ptr=bias, dt_out_ptr=dt_out, dA_cumsum_ptr=dA, batch=batch, seqlen=seqlen,
        nheads=nheads, chunk_size=chunk, dt_min=0.0, dt_max=float("inf"), stride_dt_batch=dt.stride(0),
        stride_dt_seqlen=dt.stride(1), stride_dt_head=dt.stride(2), stride_A_head=1, stride_dt_bias_head=1,
        stride_dt_out_batch=dt_out.stride(0), stride_dt_out_chunk=dt_out.stride(2),
        stride_dt_out_head=dt_out.stride(1), stride_dt_out_csize=dt_out.stride(3), stride_dA_cs_batch=dA.stride(0),
        stride_dA_cs_chunk=dA.stride(2), stride_dA_cs_head=dA.stride(1), stride_dA_cs_csize=dA.stride(3),
        DT_SOFTPLUS=True, HAS_DT_BIAS=True, BLOCK_SIZE_CHUNK=4, BLOCK_SIZE_H=2,
    )  # fmt: skip
    kernel[(batch, nchunks, triton.cdiv(nheads, 2))](**args)
    return {"dt_out": dt_out, "dA_cumsum": dA}


def main() -> int:
    assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    load("cpu")
    from mamba_ssm.ops.triton import ssd_chunk_state

    from torch_reference.triton_outputs_last import outputs_last

    seed = int(sys.argv[1])
    cases = {
        "chunk_cumsum": (cumsum_case, ssd_chunk_state._chunk_cumsum_fwd_kernel, ("dt_out_ptr", "dA_cumsum_ptr")),
    }  # fmt: skip
    result = {}
    for name, (case, tuned, outputs) in cases.items():
        own = case(tuned.fn, torch.Generator().manual_seed(seed))  # one config, no autotuning benchmark
        wrapped = case(outputs_last(tuned, outputs).fn, torch.Generator().manual_seed(seed))
        result[name] = {
            key: {"equal": bool(torch.equal(own[key], wrapped[key])), "nan": bool(wrapped[key].isnan().any())}
            for key in own
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
