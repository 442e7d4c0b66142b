#!/usr/bin/env bash
# Usage: tools/gpu-scaling-4gpu.sh WORK_DIR SDIST_DIR BUILD_PARTS_DIR (tools/gpu-parity.sh export's parts)
# On a 4-GPU machine: the published scaling points (1, 2 and 4 GPUs; benchmarks/scaling/) in phases, the 1- and
# 2-GPU runs on disjoint GPUs at once, so that the whole set fits a short lease of the machine. Join each config's
# points with compare.scaling.join afterwards.
#   phase 1, at once: each config's 1-GPU point on its own GPU (0: 780m, 1: mamba1-790m, 2: 2.7b, 3: context)
#   phase 2, at once: 780m on GPUs 0,1 and mamba1-790m on GPUs 2,3
#   phase 3, at once: 2.7b on GPUs 0,1 and context on GPUs 2,3
#   phase 4, one at a time on all four: 780m, mamba1-790m, context, 2.7b
#   phase 5 (JAX only): Mamba-1 DDP with mesh.grad_reduce=early (per-device gradients, each weight's computed with
#     its layer's backward, all-reduced explicitly), at 1 GPU on GPU 0 beside 2 on GPUs 1,2; then at 4.
# Mamba-1 runs with the scan keeping every state its backward reads (model.scan_checkpoint_every=0), the setting of
# its published points (benchmarks/README.md, multi-GPU scaling).
# Every point is a compare.scaling run (JAX, then PyTorch for fsdp/ddp) whose .json/.md land in WORK_DIR/results/;
# WORK_DIR/progress.log says what ran when. Start it with setsid: it outlasts one device call.
set -uo pipefail
usage="usage: tools/gpu-scaling-4gpu.sh WORK_DIR SDIST_DIR BUILD_PARTS_DIR"
work=${1:?$usage}
sdist=${2:?$usage}
parts=${3:?$usage}
source tools/scaling-lib.sh
declare -A args=(
    [mamba2-780m-fsdp]="--configs mamba2-780m --mode fsdp --per_device_batch 8 --seq_len 2048 --steps 12 --torch"
    [mamba1-790m-ddp]="--configs mamba1-790m --mode ddp --per_device_batch 4 --seq_len 2048 --steps 12 --torch --model.scan_checkpoint_every=0"
    [mamba2-2.7b-fsdp]="--configs mamba2-2.7b --mode fsdp --per_device_batch 2 --seq_len 2048 --steps 10 --torch"
    [mamba2-130m-context]="--configs mamba2-130m --mode context --per_device_batch 1 --seq_len 131072 --steps 8"
    [mamba1-790m-ddp-early]="--configs mamba1-790m --mode ddp --per_device_batch 4 --seq_len 2048 --steps 12 --mesh.grad_reduce=early"
)
at() {  # at GPU_LIST NAME: NAME's point (JAX, then PyTorch for fsdp/ddp) on as many GPUs as GPU_LIST names
    # shellcheck disable=SC2086  # the arguments are words
    point "$1" "$2" ${args[$2]}
}
start_queue "$sdist" "$parts"
at 0 mamba2-780m-fsdp & at 1 mamba1-790m-ddp & at 2 mamba2-2.7b-fsdp & at 3 mamba2-130m-context & wait
say "phase 1 done"
at 0,1 mamba2-780m-fsdp & at 2,3 mamba1-790m-ddp & wait
say "phase 2 done"
at 0,1 mamba2-2.7b-fsdp & at 2,3 mamba2-130m-context & wait
say "phase 3 done"
for name in mamba2-780m-fsdp mamba1-790m-ddp mamba2-130m-context mamba2-2.7b-fsdp; do at 0,1,2,3 "$name"; done
say "phase 4 done"
at 0 mamba1-790m-ddp-early & at 1,2 mamba1-790m-ddp-early & wait
at 0,1,2,3 mamba1-790m-ddp-early
say "all runs done"
touch "$work/done"
