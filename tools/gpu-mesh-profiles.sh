#!/usr/bin/env bash
# On a 4-GPU machine: compare.mesh_profile (every launch named) of the steps whose scaling the fourth run left
# unexplained, each multi-GPU one beside its 1-GPU report: 780m FSDP at 4 GPUs (86%), 2.7b FSDP at 2 and 4 (75%
# and 86%), and Mamba-1 at 1 GPU (its copy fusions' scopes: 14 ms a step of concatenations).
# Usage: tools/gpu-mesh-profiles.sh WORK_DIR; start it with setsid (it outlasts one device call). Reports (.json,
# .md) and logs land in WORK_DIR/prof/, WORK_DIR/progress.log says what ran when, WORK_DIR/done marks the end.
#   phase 1, at once: the 1-GPU profiles, one GPU each (0: 780m, 1: 2.7b, 2: mamba1-790m)
#   phase 2, alone: 2.7b on GPUs 0,1; then 2.7b and 780m on all four
set -uo pipefail
work=${1:?usage: tools/gpu-mesh-profiles.sh WORK_DIR}
export PYTHONPATH=. PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p "$work/prof"
log="$work/progress.log"
say() { echo "$(date +%H:%M:%S) $*" | tee -a "$log"; }
profile() {  # profile GPU_LIST NAME ARGS...: one compare.mesh_profile run on those GPUs
    local gpus=$1 name=$2 began
    shift 2
    began=$(date +%s)
    say "start $name on GPUs $gpus"
    CUDA_VISIBLE_DEVICES=$gpus python3 -m compare.mesh_profile --name_launches --seq_len=2048 --steps 5 "$@" \
        --out "$work/prof/$name" > "$work/prof/$name.log" 2>&1
    say "end $name: exit $? after $(( $(date +%s) - began )) s"
}
m780="--config mamba2-780m"
m27="--config mamba2-2.7b"
profile 0 780m-1 $m780 --batch_size=8 & profile 1 27b-1 $m27 --batch_size=2 &
profile 2 mamba1-1 --config mamba1-790m --batch_size=4 & wait
say "phase 1 done"
profile 0,1 27b-2 $m27 --batch_size=4 --mesh.fsdp=2 --beside "$work/prof/27b-1.json"
profile 0,1,2,3 27b-4 $m27 --batch_size=8 --mesh.fsdp=4 --beside "$work/prof/27b-1.json"
profile 0,1,2,3 780m-4 $m780 --batch_size=32 --mesh.fsdp=4 --beside "$work/prof/780m-1.json"
say "all profiles done"
touch "$work/done"
