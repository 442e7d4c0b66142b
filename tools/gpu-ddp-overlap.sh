#!/usr/bin/env bash
# On a 4-GPU machine: does mesh.grad_reduce=early make Mamba-1's data-parallel step start its gradient all-reduces
# during the backward (the sixth run's profile-less question), and is the step then faster than PyTorch's DDP?
# mamba1-790m, 4 sequences of 2048 per GPU, NCCL_NVLS_ENABLE=0, PyTorch beside the default (xla) points.
# Usage: tools/gpu-ddp-overlap.sh WORK_DIR SDIST_DIR BUILD_PARTS_DIR (tools/gpu-parity.sh export's parts); start it
# with setsid (it outlasts one device call). Points land in WORK_DIR/results/, profiles in WORK_DIR/prof/,
# WORK_DIR/progress.log says what ran when, WORK_DIR/done marks the end.
#   phase 1, at once: the 1-GPU point with PyTorch (GPU 0); early at 2 GPUs (1,2); the 1-GPU profile (3)
#   phase 2, at once: the 2-GPU point with PyTorch (0,1); early's 2-GPU profile beside the 1-GPU one (2,3)
#   phase 3, alone on all four: the 4-GPU point with PyTorch, early at 4, then the 4-GPU profiles, xla and early
# At one GPU the two reductions are the same program (there is nothing to reduce): early's efficiency is against
# the default's 1-GPU point.
set -uo pipefail
usage="usage: tools/gpu-ddp-overlap.sh WORK_DIR SDIST_DIR BUILD_PARTS_DIR"
work=${1:?$usage}
sdist=${2:?$usage}
parts=${3:?$usage}
export PYTHONPATH=. PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p "$work/results" "$work/prof"
log="$work/progress.log"
source tools/scaling-lib.sh
ddp="--configs mamba1-790m --mode ddp --per_device_batch 4 --seq_len 2048 --steps 12"
early="--mesh.grad_reduce=early"
m1="--config mamba1-790m"
start_queue "$sdist" "$parts"
# shellcheck disable=SC2086  # the argument strings are words
{
    point 0 mamba1-790m-ddp $ddp --torch &
    point 1,2 mamba1-790m-ddp-early $ddp $early &
    profile 3 mamba1-1 $m1 --batch_size=4 &
    wait
    say "phase 1 done"
    point 0,1 mamba1-790m-ddp $ddp --torch &
    profile 2,3 mamba1-2-early $m1 --batch_size=8 --mesh.data=2 $early --beside "$work/prof/mamba1-1.json" &
    wait
    say "phase 2 done"
    point 0,1,2,3 mamba1-790m-ddp $ddp --torch
    point 0,1,2,3 mamba1-790m-ddp-early $ddp $early
    profile 0,1,2,3 mamba1-4-xla $m1 --batch_size=16 --mesh.data=4 --beside "$work/prof/mamba1-1.json"
    profile 0,1,2,3 mamba1-4-early $m1 --batch_size=16 --mesh.data=4 $early --beside "$work/prof/mamba1-1.json"
}
say "all done"
touch "$work/done"
