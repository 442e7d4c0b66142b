#!/usr/bin/env bash
# On a 4-GPU machine: compare.mesh_profile (every launch named) of the steps whose scaling the fourth run left
# unexplained, each multi-GPU one beside its 1-GPU report: 780m FSDP at 4 GPUs (86%), 2.7b FSDP at 2 GPUs (75%),
# and Mamba-1 at 1 GPU (its copy fusions' scopes: 14 ms a step of concatenations). Beside them, JAX-only
# compare.scaling points: the context-parallel 130m at 1, 2 and 4 GPUs (after d48a287: one SSD per layer), and
# 780m FSDP at 1 and 4 GPUs with mesh.fsdp_gather=xla and =gather. The FSDP profiles and points pin xla, the default
# when this ran (75281fe), so that the script reruns what it measured.
# Usage: tools/gpu-mesh-profiles.sh WORK_DIR; start it with setsid (it outlasts one device call). Profiles (.json,
# .md) and logs land in WORK_DIR/prof/, scaling points in WORK_DIR/results/, WORK_DIR/progress.log says what ran
# when, WORK_DIR/done marks the end.
#   phase 1, at once: the 1-GPU profiles (0: 780m, then its scaling point; 1: 2.7b; 2: mamba1-790m) and the
#            context point on GPU 3
#   phase 2, at once: 2.7b's profile on GPUs 0,1 and the context point on GPUs 2,3
#   phase 3, alone on all four: 780m's profile, then the points context, 780m, 780m gather
set -uo pipefail
work=${1:?usage: tools/gpu-mesh-profiles.sh WORK_DIR}
source tools/scaling-lib.sh
m780="--config mamba2-780m --mesh.fsdp_gather=xla"
m27="--config mamba2-2.7b --mesh.fsdp_gather=xla"
p780="--configs mamba2-780m --mode fsdp --per_device_batch 8 --seq_len 2048 --steps 12"
context="--configs mamba2-130m --mode context --per_device_batch 1 --seq_len 131072 --steps 8"
# shellcheck disable=SC2086  # the argument strings are words
{
    { profile 0 780m-1 $m780 --batch_size=8; point 0 mamba2-780m-fsdp $p780; } &
    profile 1 27b-1 $m27 --batch_size=2 &
    profile 2 mamba1-1 --config mamba1-790m --batch_size=4 &
    point 3 mamba2-130m-context $context &
    wait
    say "phase 1 done"
    profile 0,1 27b-2 $m27 --batch_size=4 --mesh.fsdp=2 --beside "$work/prof/27b-1.json" &
    point 2,3 mamba2-130m-context $context &
    wait
    say "phase 2 done"
    profile 0,1,2,3 780m-4 $m780 --batch_size=32 --mesh.fsdp=4 --beside "$work/prof/780m-1.json"
    point 0,1,2,3 mamba2-130m-context $context
    point 0,1,2,3 mamba2-780m-fsdp $p780 --mesh.fsdp_gather=xla
    point 0,1,2,3 mamba2-780m-fsdp-gather $p780 --mesh.fsdp_gather=gather
}
say "all done"
touch "$work/done"
