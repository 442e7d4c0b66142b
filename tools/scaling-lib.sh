#!/usr/bin/env bash
# Usage: work=WORK_DIR; source tools/scaling-lib.sh   (from a queue script such as tools/gpu-scaling-4gpu.sh)
# Shared by the multi-GPU queue scripts (sourced, not run, after the script sets $work, its work folder): the
# queue's environment (the repo on PYTHONPATH, unbuffered output, NCCL_NVLS_ENABLE=0), $work/results/ for points,
# $work/prof/ for profiles and $log ($work/progress.log), then: say, a timestamped line to stdout and $log; point,
# one compare.scaling point (its arguments say which sides run); profile, one compare.scaling.mesh_profile run; start_queue,
# the GPUs named in the log and mamba-ssm's extensions imported.
export PYTHONPATH=. PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p "$work/results" "$work/prof"
log="$work/progress.log"
say() { echo "$(date +%H:%M:%S) $*" | tee -a "$log"; }
point() {  # point GPU_LIST NAME ARGS...: one compare.scaling point on as many GPUs as GPU_LIST names
    local gpus=$1 name=$2 began n
    shift 2
    n=$(( $(tr -cd , <<< "$gpus" | wc -c) + 1 ))
    began=$(date +%s)
    say "start $name-$n on GPUs $gpus"
    CUDA_VISIBLE_DEVICES=$gpus python3 -m compare.scaling "$@" --gpus "$n" --out "$work/results/$name-$n" \
        > "$work/results/$name-$n.log" 2>&1
    say "end $name-$n: exit $? after $(( $(date +%s) - began )) s"
}
profile() {  # profile GPU_LIST NAME ARGS...: one compare.scaling.mesh_profile run (every launch named) on those GPUs
    local gpus=$1 name=$2 began
    shift 2
    began=$(date +%s)
    mkdir -p "$work/prof"
    say "start $name on GPUs $gpus"
    CUDA_VISIBLE_DEVICES=$gpus python3 -m compare.scaling.mesh_profile --name_launches --seq_len=2048 --steps 5 "$@" \
        --out "$work/prof/$name" > "$work/prof/$name.log" 2>&1
    say "end $name: exit $? after $(( $(date +%s) - began )) s"
}
start_queue() {  # start_queue SDIST_DIR BUILD_PARTS_DIR: the GPUs in the log; mamba-ssm's built extensions imported
    say "gpus: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';')"
    bash tools/gpu-parity.sh "$work/build" "$1" "import:$2" > "$work/build.log" 2>&1
    say "extensions ready: exit $?"
}
