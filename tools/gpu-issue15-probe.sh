#!/usr/bin/env bash
# Issue 15's open SSD checks on one GPU, each shape beside mamba-ssm's Triton SSD in the same process (median of 10):
# run from the repository root as the device command, files under $OUT. Needs mamba-ssm's sdist in .sdist/ (its
# Triton SSD only: the `unpack` stage of tools/gpu-parity.sh, no CUDA build).
#   n256c: B2 L8192 H32 N256 G4: dB/dC programs sharing a group's heads (bwd_head_splits 1, 2 against the default 4:
#          the default's float32 partials cost a 203 us XLA sum there on an H100)
#   n256a: B8 L2048 H24 N256 G1: the same split, where heads per group are 24
#   n256b: B1 L16384 H24 N256: the backward's state rebuild on 64-wide head tiles
#   long:  B1 L65536 H128 N128 with today's defaults (the row-wise decay gradient); it needs about 4 minutes
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
bash tools/gpu-parity.sh /tmp/p .sdist unpack > "$OUT/unpack.log" 2>&1 || { tail "$OUT/unpack.log"; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/device.txt"
K="python3 -m compare.kernels --op ssd --torch --reps 10 --profile"
run() {
    local name=$1 limit=$2
    shift 2
    echo "== $name $(date +%T)"
    timeout "$limit" $K --out "$OUT/$name" "$@" > "$OUT/$name.txt" 2>&1
    echo "exit $?"
    grep -E "^\| \S+ \| (forward|forward\+backward) \|" "$OUT/$name.txt" | cut -c1-140
}
run n256c 200 --shape n256c=2,8192,32,64,256,4,256 --shapes n256c --pallas-config bwd_head_splits=1 \
    --pallas-config bwd_head_splits=2
run n256a 150 --shape n256a=8,2048,24,64,256,1,256 --shapes n256a --pallas-config bwd_head_splits=1 \
    --pallas-config bwd_head_splits=8
run n256b 120 --shape n256b=1,16384,24,64,256,1,256 --shapes n256b --pallas-config rebuild_block_p=64
run long 300 --shapes long
