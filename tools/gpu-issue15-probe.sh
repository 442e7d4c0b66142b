#!/usr/bin/env bash
# Issue 15's open SSD checks on one GPU, each shape's variants in one process (median of 10), mamba-ssm's Triton SSD
# beside them where a run says --torch: run from the repository root as the device command,
# `bash tools/gpu-issue15-probe.sh RUN ...`, files in $OUT/issue15-probe.tgz. Needs mamba-ssm's sdist in .sdist/ (its
# Triton SSD only: the `unpack` stage of tools/gpu-parity.sh, no CUDA build). The runs (this round: the two-level
# forward's fused segments, SsdConfig.fused_segments, against its block-state pass + output pass; earlier rounds'
# runs are in this file's history):
#   long:   B1 L65536 H128 N128 (segments of 2048): the default (fused, 64 head dims, 4 warps), the block-state pass
#           + output pass it replaced, and two other fused tilings, beside mamba-ssm (330 s did not finish it; alone)
#   few:    B1 L16384 H24 and B1 L131072 H24 (segments of 1024 and 2048), default and unfused, beside mamba-ssm
#   whole:  B4 L16384 H64 G8, where the default stays one-level (256 whole-head programs): two levels with fused
#           segments against it
#   n256:   B2 L8192 H32 N256 G4 (one-level default; the forward 0.88x mamba-ssm's in the eleventh round): two levels
#           with fused segments on 16 and 32 head dims (compiled for sm_90: 4 and 188 bytes of spills a thread)
#   short:  L 8192, where the split forward ran one-level (too few programs for the fused forward): B2 H32 and B1 H24
#           at N 128, the default (two levels, fused segments of 1024) against one level and segments of 512
#   prof:   the long shape's per-kernel profile, the default (fused segments since this round) and without them
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
FS=fused_segments=1
OFF=fused_segments=0  # the default fuses the segments since this round: this is the path it replaced
run long 480 --shapes long --torch --pallas-config $OFF --pallas-config block_p=32 --pallas-config num_warps=8
run few 240 --shape b1-L16384-h24=1,16384,24,64,128,1,256 --shape b1-L131072-h24=1,131072,24,64,128,1,256 \
    --shapes b1-L16384-h24 b1-L131072-h24 --torch --pallas-config $OFF
run whole 200 --shape b4-L16384-h64-g8=4,16384,64,64,128,8,256 --shapes b4-L16384-h64-g8 --no-torch \
    --pallas-config two_level_states=1 --pallas-config two_level_states=1,$FS
N256="two_level_states=1,state_segment=1024,$FS"
run n256 150 --shape b2-L8192-h32-n256-g4=2,8192,32,64,256,4,256 --shapes b2-L8192-h32-n256-g4 --torch \
    --pallas-config $N256,block_p=16 --pallas-config $N256,block_p=32
run short 200 --shape b2-L8192-h32=2,8192,32,64,128,1,256 --shape b1-L8192-h24=1,8192,24,64,128,1,256 \
    --shapes b2-L8192-h32 b1-L8192-h24 --torch --pallas-config two_level_states=0,$OFF --pallas-config state_segment=512
run prof 240 --shapes long --no-torch --profile --reps 5 --pallas-config $OFF
# one file back: this run's files (folders under $OUT are left as they are)
files=$(cd "$OUT" && find . -maxdepth 1 -type f ! -name issue15-probe.tgz)
(cd "$OUT" && tar czf /tmp/issue15-probe.tgz $files && rm -f $files && mv /tmp/issue15-probe.tgz .)
