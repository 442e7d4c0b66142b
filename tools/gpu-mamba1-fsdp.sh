#!/usr/bin/env bash
# On a 4-GPU machine: Mamba-1's data-parallel step as FSDP (parameters, gradients and AdamW state split; matmul
# weights gathered and their gradients reduce-scattered in bf16) beside PyTorch's DDP.
# mamba1-790m, 4 sequences of 2048 per GPU, NCCL_NVLS_ENABLE=0. Variants (JAX):
#   fsdp-dense  model.scan_checkpoint_every=0: the scan keeps every state its backward reads (no state rebuild),
#               PyTorch's DDP beside it at each count (compare.scaling --torch_parallel ddp);
#   fsdp        the scan's default kept states (JAX only).
# Usage: tools/gpu-mamba1-fsdp.sh WORK_DIR SDIST_DIR BUILD_PARTS_DIR (tools/gpu-parity.sh export's parts); start it
# with setsid (it outlasts one device call). Points land in WORK_DIR/results/, WORK_DIR/progress.log says what ran
# when, WORK_DIR/done marks the end.
#   phase 1, at once: fsdp-dense at 1 GPU with PyTorch (GPU 0), fsdp at 1 GPU (GPU 1), fsdp-dense at 2 GPUs with
#            PyTorch (GPUs 2,3);
#   phase 2, alone on all four GPUs: fsdp-dense with PyTorch, then fsdp;
#   phase 3, at once: fsdp at 2 GPUs (GPUs 0,1) beside a second PyTorch DDP point at 2 (GPUs 2,3: its spread).
set -uo pipefail
usage="usage: tools/gpu-mamba1-fsdp.sh WORK_DIR SDIST_DIR BUILD_PARTS_DIR"
work=${1:?$usage}
sdist=${2:?$usage}
parts=${3:?$usage}
source tools/scaling-lib.sh
fsdp="--configs mamba1-790m --mode fsdp --per_device_batch 4 --seq_len 2048 --steps 12"
torch_ddp="--torch --torch_parallel ddp"
dense="--model.scan_checkpoint_every=0"
start_queue "$sdist" "$parts"
# shellcheck disable=SC2086  # the argument strings are words
{
    point 0 mamba1-790m-fsdp-dense $fsdp $dense $torch_ddp &
    point 1 mamba1-790m-fsdp $fsdp &
    point 2,3 mamba1-790m-fsdp-dense $fsdp $dense $torch_ddp &
    wait
    say "phase 1 done"
    point 0,1,2,3 mamba1-790m-fsdp-dense $fsdp $dense $torch_ddp
    point 0,1,2,3 mamba1-790m-fsdp $fsdp
    say "phase 2 done"
    point 0,1 mamba1-790m-fsdp $fsdp &
    point 2,3 mamba1-790m-torch-ddp-again $fsdp $torch_ddp --no-jax &
    wait
}
say "all done"
touch "$work/done"
