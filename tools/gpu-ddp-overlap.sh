#!/usr/bin/env bash
# On a 4-GPU (or 2-GPU) machine: Mamba-1's data-parallel step against PyTorch's DDP, with what might close the gap.
# mamba1-790m, 4 sequences of 2048 per GPU, NCCL_NVLS_ENABLE=0, PyTorch beside the default points. Variants (JAX only):
#   early  mesh.grad_reduce=early: weight gradients tied to their layer's backward, summed by explicit psums;
#   dense  model.scan_checkpoint_every=0: the scan keeps every state its backward reads (no state rebuild, about
#          9 GiB more per GPU);
#   nccl4  NCCL_MAX_NCHANNELS=4: NCCL's kernels on fewer SMs (the seventh run's 2-GPU step lost its time to compute
#          slowed beside them, not to exposed communication).
# Usage: tools/gpu-ddp-overlap.sh WORK_DIR SDIST_DIR BUILD_PARTS_DIR [GPUS] (tools/gpu-parity.sh export's parts;
# GPUS 4, the default, or 2); start it with setsid (it outlasts one device call). Points land in WORK_DIR/results/,
# profiles in WORK_DIR/prof/, WORK_DIR/progress.log says what ran when, WORK_DIR/done marks the end.
#   phase 1, at once: the 1-GPU point with PyTorch (GPU 0), dense at 1 GPU (GPU 1), and on 4 GPUs the 2-GPU point
#            with PyTorch (GPUs 2,3);
#   phase 2, alone on all GPUs: the point with PyTorch, then dense, early and nccl4;
#   phase 3 (PROFILES=0 skips it): compare.mesh_profile at 1 GPU, then on all GPUs with each reduction beside it.
# At one GPU early is the default's program (there is nothing to reduce): its efficiency is against the default's.
set -uo pipefail
usage="usage: tools/gpu-ddp-overlap.sh WORK_DIR SDIST_DIR BUILD_PARTS_DIR [GPUS]"
work=${1:?$usage}
sdist=${2:?$usage}
parts=${3:?$usage}
gpus=${4:-4}
case "$gpus" in
    2) all=0,1 ;;
    4) all=0,1,2,3 ;;
    *) echo "GPUS must be 2 or 4, got $gpus" >&2; exit 2 ;;
esac
source tools/scaling-lib.sh
ddp="--configs mamba1-790m --mode ddp --per_device_batch 4 --seq_len 2048 --steps 12"
early="--mesh.grad_reduce=early"
dense="--model.scan_checkpoint_every=0"
m1="--config mamba1-790m"
start_queue "$sdist" "$parts"
one="$work/prof/mamba1-1.json"
# shellcheck disable=SC2086  # the argument strings are words
{
    point 0 mamba1-790m-ddp $ddp --torch &
    point 1 mamba1-790m-ddp-dense $ddp $dense &
    [ "$gpus" = 4 ] && point 2,3 mamba1-790m-ddp $ddp --torch &
    wait
    say "phase 1 done"
    point $all mamba1-790m-ddp $ddp --torch
    point $all mamba1-790m-ddp-dense $ddp $dense
    point $all mamba1-790m-ddp-early $ddp $early
    NCCL_MAX_NCHANNELS=4 point $all mamba1-790m-ddp-nccl4 $ddp
    say "phase 2 done"
    if [ "${PROFILES:-1}" != 0 ]; then
        profile 0 mamba1-1 $m1 --batch_size=4
        profile $all mamba1-$gpus-xla $m1 --batch_size=$((4 * gpus)) --mesh.data=$gpus --beside "$one"
        profile $all mamba1-$gpus-early $m1 --batch_size=$((4 * gpus)) --mesh.data=$gpus $early --beside "$one"
    fi
}
say "all done"
touch "$work/done"
