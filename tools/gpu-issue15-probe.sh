#!/usr/bin/env bash
# Issue 15's open SSD checks on one GPU, each shape's variants in one process (median of 10), mamba-ssm's Triton SSD
# beside them where a run says --torch: run from the repository root as the device command,
# `bash tools/gpu-issue15-probe.sh RUN ...`, files in $OUT/issue15-probe.tgz. Needs mamba-ssm's sdist in .sdist/ (its
# Triton SSD only: the `unpack` stage of tools/gpu-parity.sh, no CUDA build). The runs (this round: the fused
# forward's walk cut into segments, SsdConfig.fused_segments, at L <= 8192 where the default walks whole sequences or
# splits the forward into a block-state pass and an output pass; earlier rounds' runs are in this file's history):
#   mid:    2.7b (B4 L2048 H80: 320 fused programs, about 2.4 waves) and B4 L4096 H64: the default against two levels
#           with fused segments of 1024 and 512 positions (backward one-level, as the default's)
#   few:    B1 L4096 H24 and B2 L2048 H8 (too few programs for the fused forward: split, one level): the default
#           against fused segments of 512 and 256 (backward two-level too)
#   n64:    B4 L4096 H32 N64 G2: the default against fused segments of 512
#   seg:    more shapes with few fused programs: B16 L512 H8, B1 L1024 H8, B4 L1024 H24, B1 L2048 H24, B2 L8192 H8
#           and B1 L8192 H24 (already two-level, segments of 1024): the default against segments of 512 and 256
#   verify: the new default (SsdConfig segments of L / 16 where the fused forward has few programs) against the rule
#           before it (one level below L 8192; segments of 1024 at L 8192), beside mamba-ssm, at the shapes it
#           changes and two it leaves (B4 L1024 H24, B2 L8192 H32)
#   between: a quarter to all of the SMs' worth of fused programs (split, one level below L 8192): B2 L4096 H32,
#           B4 L2048 H24, B2 L4096 H48, B4 L4096 H32 N64 G2, B2 L2048 H32 P128: the default against fused segments of
#           512 and 256 with the backward one-level
#   verify2: the default with both new rules against one level (two_level_states=0), beside mamba-ssm, at the
#           partial-wave shapes, one few-program shape and 130m (unchanged)
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
SEG="fused_forward_max_l=0,two_level_states=1,fused_segments=1,state_segment"
ONE=two_level_backward=0
run mid 420 --shape b4-L4096-h64=4,4096,64,64,128,1,256 --shapes 2.7b b4-L4096-h64 --torch \
    --pallas-config $SEG=1024,$ONE --pallas-config $SEG=512,$ONE
run few 300 --shape b1-L4096-h24=1,4096,24,64,128,1,256 --shape b2-L2048-h8=2,2048,8,64,128,1,256 \
    --shapes b1-L4096-h24 b2-L2048-h8 --torch --pallas-config $SEG=512 --pallas-config $SEG=256
run n64 150 --shape b4-L4096-h32-n64-g2=4,4096,32,64,64,2,256 --shapes b4-L4096-h32-n64-g2 --torch \
    --pallas-config $SEG=512
run seg 400 --shape b16-L512-h8=16,512,8,64,128,1,256 --shape b1-L1024-h8=1,1024,8,64,128,1,256 \
    --shape b4-L1024-h24=4,1024,24,64,128,1,256 --shape b1-L2048-h24=1,2048,24,64,128,1,256 \
    --shape b2-L8192-h8=2,8192,8,64,128,1,256 --shape b1-L8192-h24=1,8192,24,64,128,1,256 \
    --shapes b16-L512-h8 b1-L1024-h8 b4-L1024-h24 b1-L2048-h24 b2-L8192-h8 b1-L8192-h24 --no-torch \
    --pallas-config $SEG=512 --pallas-config $SEG=256
run verify 500 --shape b2-L2048-h8=2,2048,8,64,128,1,256 --shape b1-L2048-h24=1,2048,24,64,128,1,256 \
    --shape b1-L4096-h24=1,4096,24,64,128,1,256 --shape b1-L1024-h8=1,1024,8,64,128,1,256 \
    --shape b2-L8192-h8=2,8192,8,64,128,1,256 --shape b1-L8192-h24=1,8192,24,64,128,1,256 \
    --shape b1-L4096-h8-p128-n64-g2=1,4096,8,128,64,2,256 --shape b4-L1024-h24=4,1024,24,64,128,1,256 \
    --shapes b2-L2048-h8 b1-L2048-h24 b1-L4096-h24 b1-L1024-h8 b2-L8192-h8 b1-L8192-h24 b1-L4096-h8-p128-n64-g2 \
    b4-L1024-h24 --torch --pallas-config two_level_states=0 --pallas-config state_segment=1024
run between 300 --shape b2-L4096-h32=2,4096,32,64,128,1,256 --shape b4-L2048-h24=4,2048,24,64,128,1,256 \
    --shape b2-L4096-h48=2,4096,48,64,128,1,256 --shape b4-L4096-h32-n64-g2=4,4096,32,64,64,2,256 \
    --shape b2-L2048-h32-p128=2,2048,32,128,128,1,256 \
    --shapes b2-L4096-h32 b4-L2048-h24 b2-L4096-h48 b4-L4096-h32-n64-g2 b2-L2048-h32-p128 --no-torch \
    --pallas-config $SEG=512,$ONE --pallas-config $SEG=256,$ONE
run verify2 420 --shape b2-L4096-h32=2,4096,32,64,128,1,256 --shape b4-L2048-h24=4,2048,24,64,128,1,256 \
    --shape b2-L4096-h48=2,4096,48,64,128,1,256 --shape b4-L4096-h32-n64-g2=4,4096,32,64,64,2,256 \
    --shape b2-L2048-h32-p128=2,2048,32,128,128,1,256 --shape b1-L4096-h24=1,4096,24,64,128,1,256 \
    --shapes b2-L4096-h32 b4-L2048-h24 b2-L4096-h48 b4-L4096-h32-n64-g2 b2-L2048-h32-p128 b1-L4096-h24 130m \
    --torch --pallas-config two_level_states=0
# one file back: this run's files (folders under $OUT are left as they are)
files=$(cd "$OUT" && find . -maxdepth 1 -type f ! -name issue15-probe.tgz)
(cd "$OUT" && tar czf /tmp/issue15-probe.tgz $files && rm -f $files && mv /tmp/issue15-probe.tgz .)
