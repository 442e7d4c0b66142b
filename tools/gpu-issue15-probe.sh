#!/usr/bin/env bash
# Issue 15's open SSD checks on one GPU, each shape's variants in one process (median of 10), mamba-ssm's Triton SSD
# beside them where a run says --torch: run from the repository root as the device command,
# `bash tools/gpu-issue15-probe.sh RUN ...`, files in $OUT/issue15-probe.tgz. Needs mamba-ssm's sdist in .sdist/ (its
# Triton SSD only: the `unpack` stage of tools/gpu-parity.sh, no CUDA build). The runs (this round: d cs's incoming-state
# terms formed by the dB/dC kernel, SsdConfig.dbc_state_terms, so that ssd_bwd_dx reads neither the block states nor
# C; earlier rounds' runs are in this file's history):
#   tests:  the SSD's compiled oracle cases (pytest -m gpu -k oracle), the new path's among them
#   pair:   130m and 2.7b beside mamba-ssm, profiled: the default, the new path at the default tiling (32 head dims,
#           4 warps), on 16 head dims (161 registers for sm_90: three programs an SM) and on whole heads at 8 warps
#   long:   B1 L65536 H128 beside mamba-ssm: the default, whole heads at 8 warps with the new path and without
#   n256:   B2 L8192 H32 N256 G4 beside mamba-ssm: the default and the new path (whole heads at 8 warps there)
#   prof:   the long shape's per-kernel profile, the default and the new path on 32 head dims
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
bash tools/gpu-parity.sh /tmp/p .sdist unpack > "$OUT/unpack.log" 2>&1 || { tail "$OUT/unpack.log"; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/device.txt"
K="python3 -m compare.kernels --op ssd --reps 10"
wanted=" $* "
run() {
    local name=$1 limit=$2
    shift 2
    [[ $wanted == *" $name "* ]] || return 0
    echo "== $name $(date +%T)"
    timeout "$limit" $K --out "$OUT/$name" "$@" > "$OUT/$name.txt" 2>&1
    echo "exit $?"
    grep -E "^\| \S+ \| (forward|forward\+backward) \|" "$OUT/$name.txt" | cut -c1-140
}
NEW=dbc_state_terms=1
if [[ $wanted == *" tests "* ]]; then
    echo "== tests $(date +%T)"
    timeout 200 python3 -m pytest -q --tb=short -m gpu -p no:cacheprovider -k oracle \
        tests/pallas_kernels/test_ssd_pallas_gpu.py > "$OUT/tests.txt" 2>&1
    echo "exit $?"
    grep -E "passed|failed|Error" "$OUT/tests.txt" | tail -n 8
fi
run pair 330 --shapes 130m 2.7b --torch --profile --pallas-config $NEW --pallas-config $NEW,bwd_block_p=16 \
    --pallas-config $NEW,bwd_block_p=64,bwd_num_warps=8
run long 450 --shapes long --torch --pallas-config $NEW,bwd_block_p=64,bwd_num_warps=8 --pallas-config bwd_block_p=64,bwd_num_warps=8
run n256 200 --shape b2-L8192-h32-n256-g4=2,8192,32,64,256,4,256 --shapes b2-L8192-h32-n256-g4 --torch \
    --pallas-config $NEW
run prof 240 --shapes long --no-torch --profile --reps 5 --pallas-config $NEW
# one file back: this run's files (folders under $OUT are left as they are)
files=$(cd "$OUT" && find . -maxdepth 1 -type f ! -name issue15-probe.tgz)
(cd "$OUT" && tar czf /tmp/issue15-probe.tgz $files && rm -f $files && mv /tmp/issue15-probe.tgz .)
