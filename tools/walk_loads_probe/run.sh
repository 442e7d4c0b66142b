#!/usr/bin/env bash
# What the forward's Mosaic walk spends on its loads (issue 15, twenty-eighth round), as the device command from the
# repository root: `bash tools/walk_loads_probe/run.sh`. walk_kernel.py is kernel_fwd_mosaic.py of this commit with
# WALK_DIAG=fixed_bc (B and C copied once, before the walk, instead of every block) or fixed_all (x and z too): the
# outputs are wrong in those modes, the times say what the per-block loads cost. Forward only, median of 10
# (compare.kernels.median_ms), each mode and config in its own process.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name --format=csv,noheader
for shape in 2,8192,32,64,256,4 8,2048,24,64,256,1 8,2048,24,64,128,1; do
    for cfg in "" fwd_walk_stages=2; do
        for mode in default fixed_bc fixed_all; do
            WALK_DIAG=$mode timeout 100 python3 tools/walk_loads_probe/time_forward.py --shape $shape --reps 10 \
                ${cfg:+--config $cfg} 2>&1 | grep -E "median|Error|error" | tail -2
        done
    done
done
