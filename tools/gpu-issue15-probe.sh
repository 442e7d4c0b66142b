#!/usr/bin/env bash
# Issue 15's open SSD checks on one GPU, each shape beside mamba-ssm's Triton SSD in the same process (median of 10):
# run from the repository root as the device command, `bash tools/gpu-issue15-probe.sh [RUN ...]` (default: all four
# below, about 12 minutes: name n256c n256a n128 in one call and long in another), files in $OUT/issue15-probe.tgz.
# Needs mamba-ssm's sdist in .sdist/ (its Triton SSD only: the `unpack` stage of tools/gpu-parity.sh, no CUDA build).
#   n256c: B2 L8192 H32 N256 G4, today's default (one dB/dC program per group, dB/dC stored in bf16) against the
#          fused forward on 16 head dims (60 bytes of spills compiled for sm_90, where 32 and 64 spill 468-1008):
#          the split forward's two passes cost 277 + 274 us there, against mamba-ssm's 546 for the whole forward
#   n256a: B8 L2048 H24 N256 G1, the same two
#   n128:  the 130m and 2.7b shapes with one dB/dC program per group (bwd_head_splits=1; the default keeps 4 at N 128)
#   long:  B1 L65536 H128 N128 with today's defaults; it needs about 4 minutes
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
bash tools/gpu-parity.sh /tmp/p .sdist unpack > "$OUT/unpack.log" 2>&1 || { tail "$OUT/unpack.log"; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/device.txt"
K="python3 -m compare.kernels --op ssd --torch --reps 10 --profile"
wanted=" ${*:-n256c n256a n128 long} "  # the runs named as arguments (default all: more than one call's 10 minutes)
run() {
    local name=$1 limit=$2
    shift 2
    [[ $wanted == *" $name "* ]] || return 0
    echo "== $name $(date +%T)"
    timeout "$limit" $K --out "$OUT/$name" "$@" > "$OUT/$name.txt" 2>&1
    echo "exit $?"
    grep -E "^\| \S+ \| (forward|forward\+backward) \|" "$OUT/$name.txt" | cut -c1-140
}
F="--pallas-config fused_forward_max_l=8192,block_p=16"
run n256c 150 --shape n256c=2,8192,32,64,256,4,256 --shapes n256c $F
run n256a 120 --shape n256a=8,2048,24,64,256,1,256 --shapes n256a $F
run n128 150 --shapes 130m 2.7b --pallas-config bwd_head_splits=1
run long 300 --shapes long
(cd "$OUT" && tar czf /tmp/issue15-probe.tgz ./* && rm -f ./* && mv /tmp/issue15-probe.tgz .)  # one file back
