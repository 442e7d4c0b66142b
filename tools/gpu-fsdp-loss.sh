#!/usr/bin/env bash
# On a 4-GPU machine: FSDP after the per-device LM head and loss (the head's weight gradient reduced once a step,
# not once a chunk), JAX only: mamba2-780m and mamba2-2.7b with mesh.fsdp_gather=gather at 1, 2 and 4 GPUs, and
# 780m with mesh.fsdp_gather=xla (the default when this ran) at 2 GPUs beside them.
# Usage: tools/gpu-fsdp-loss.sh WORK_DIR; start it with setsid (it outlasts one device call). Points (.json, .md)
# and logs land in WORK_DIR/results/, WORK_DIR/progress.log says what ran when, WORK_DIR/done marks the end.
#   phase 1, at once: 780m on GPU 0, 2.7b on GPU 1, 780m gather on GPUs 2,3
#   phase 2, at once: 2.7b gather on GPUs 0,1, 780m xla on GPUs 2,3
#   phase 3, alone on all four: 780m gather, then 2.7b gather
set -uo pipefail
work=${1:?usage: tools/gpu-fsdp-loss.sh WORK_DIR}
source tools/scaling-lib.sh
m780="--configs mamba2-780m --mode fsdp --per_device_batch 8 --seq_len 2048 --steps 12"
m27="--configs mamba2-2.7b --mode fsdp --per_device_batch 2 --seq_len 2048 --steps 10"
gather="--mesh.fsdp_gather=gather"
say "gpus: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';')"
# shellcheck disable=SC2086  # the argument strings are words
{
    point 0 mamba2-780m-fsdp $m780 & point 1 mamba2-2.7b-fsdp $m27 & point 2,3 mamba2-780m-fsdp-gather $m780 $gather &
    wait
    say "phase 1 done"
    point 0,1 mamba2-2.7b-fsdp-gather $m27 $gather & point 2,3 mamba2-780m-fsdp $m780 --mesh.fsdp_gather=xla & wait
    say "phase 2 done"
    point 0,1,2,3 mamba2-780m-fsdp-gather $m780 $gather
    point 0,1,2,3 mamba2-2.7b-fsdp-gather $m27 $gather
}
say "all done"
touch "$work/done"
