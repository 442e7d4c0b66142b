#!/usr/bin/env bash
# On a machine with several GPUs: the multi-GPU scaling run (compare.scaling), JAX beside mamba-ssm's DDP / FSDP2.
# Usage: tools/gpu-scaling.sh WORK_DIR SDIST_DIR [BUILD_PARTS_DIR]
#   1. mamba-ssm's CUDA extensions: imported from BUILD_PARTS_DIR (tools/gpu-parity.sh export) or built; a build is
#      exported to WORK_DIR/export/ (carry it to a later machine as BUILD_PARTS_DIR); BUILD_CPUS=LIST pins the build
#      to those cores (taskset), leaving the others to work timed beside it
#   2. with WAIT_FOR=FILE, waits (at most 10 minutes) until FILE exists: the GPUs are free of other work
#   3. compare.scaling for each run of RUNS (default below: one per line, "name: [NAME=value ...] arguments", the
#      NAME=value words that run's environment; GPUS=2,4 among them sets that run's GPU counts), on GPU counts GPUS
#      (default: 1, 2, 4, ... up to the GPUs present), each run's .json/.md in WORK_DIR/results/ as soon as it ends.
#      The last run, two 131072-long sequences, is the context-parallel case one 80 GB GPU cannot hold (one took
#      49.5 GiB on an H100). The -xla, -dense, -pgle, -sol and -early lines are this side's variants of a line before
#      them (-xla: FSDP left to XLA's partitioner; -dense: the scan keeps every state, no rebuild kernel, about 9 GiB
#      more at 790m; -pgle and -sol: XLA's
#      scheduler given the first step's measured op times, or its speed-of-light cost model, so that it may start
#      the gradient all-reduces during the backward: the 2-GPU profile had all of them after it; PGLE changed nothing
#      on 4 H100s; -early: mesh.grad_reduce=early, each weight gradient computed with its layer's backward)
# WORK_DIR/progress.log says what ran and how long it took. A run can take longer than one device call: start this
# with setsid (it outlives the call) and read WORK_DIR from later calls.
set -uo pipefail
usage="usage: tools/gpu-scaling.sh WORK_DIR SDIST_DIR [BUILD_PARTS_DIR]"
work=${1:?$usage}
sdist=${2:?$usage}
parts=${3:-}
export PYTHONPATH=. PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
count=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
gpus=${GPUS:-$(n=1; while [ "$n" -le "$count" ]; do printf '%s ' "$n"; n=$(( n * 2 )); done)}
default_runs="mamba2-780m-fsdp: --configs mamba2-780m --mode fsdp --per_device_batch 8 --seq_len 2048 --steps 12 --torch
mamba2-780m-fsdp-xla: GPUS=2,4 --configs mamba2-780m --mode fsdp --per_device_batch 8 --seq_len 2048 --steps 12 --mesh.fsdp_gather=xla
mamba1-790m-ddp: --configs mamba1-790m --mode ddp --per_device_batch 4 --seq_len 2048 --steps 12 --torch
mamba1-790m-ddp-dense: --configs mamba1-790m --mode ddp --per_device_batch 4 --seq_len 2048 --steps 12 --model.scan_checkpoint_every=0
mamba1-790m-ddp-pgle: GPUS=2,4 JAX_ENABLE_PGLE=true JAX_PGLE_PROFILING_RUNS=1 --configs mamba1-790m --mode ddp --per_device_batch 4 --seq_len 2048 --steps 12
mamba1-790m-ddp-sol: GPUS=2,4 XLA_FLAGS=--xla_gpu_enable_analytical_sol_latency_estimator=true --configs mamba1-790m --mode ddp --per_device_batch 4 --seq_len 2048 --steps 12
mamba1-790m-ddp-early: GPUS=2,4 --configs mamba1-790m --mode ddp --per_device_batch 4 --seq_len 2048 --steps 12 --mesh.grad_reduce=early
mamba2-2.7b-fsdp: --configs mamba2-2.7b --mode fsdp --per_device_batch 2 --seq_len 2048 --steps 10 --torch
mamba2-2.7b-fsdp-xla: GPUS=2,4 --configs mamba2-2.7b --mode fsdp --per_device_batch 2 --seq_len 2048 --steps 10 --mesh.fsdp_gather=xla
mamba2-130m-context: --configs mamba2-130m --mode context --per_device_batch 1 --seq_len 131072 --steps 8
mamba2-130m-context-b2: GPUS=2,4 --configs mamba2-130m --mode context --per_device_batch 2 --seq_len 131072 --steps 8"
runs=${RUNS:-$default_runs}
mkdir -p "$work/results" "$work/export"
log="$work/progress.log"
say() { echo "$(date +%H:%M:%S) $*" | tee -a "$log"; }
say "gpus: $count ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)); counts run: $gpus"
began=$(date +%s)
if [ -n "$parts" ]; then
    bash tools/gpu-parity.sh "$work/build" "$sdist" "import:$parts" > "$work/build.log" 2>&1
    built=$?
else
    ${BUILD_CPUS:+taskset -c $BUILD_CPUS} bash tools/gpu-parity.sh "$work/build" "$sdist" build export > "$work/build.log" 2>&1
    built=$?
    mv "$work"/build/torch-build.tar.xz.part-* "$work/export/" 2>/dev/null
fi
say "extensions ready: exit $built after $(( $(date +%s) - began )) s"
if [ -n "${WAIT_FOR:-}" ]; then
    for _ in $(seq 600); do [ -e "$WAIT_FOR" ] && break; sleep 1; done
    say "waited for $WAIT_FOR"
fi
while IFS= read -r line; do
    [ -z "$line" ] && continue
    name=${line%%:*}
    began=$(date +%s)
    say "start $name"
    read -r -a words <<< "${line#*:}"
    settings=()  # leading NAME=value words: that run's environment (XLA_FLAGS variants)
    counts=$gpus
    while [ ${#words[@]} -gt 0 ] && [[ ${words[0]} =~ ^[A-Z_]+= ]]; do
        case ${words[0]} in GPUS=*) counts=${words[0]#GPUS=}; counts=${counts//,/ } ;; *) settings+=("${words[0]}") ;; esac
        words=("${words[@]:1}")
    done
    present=""
    for n in $counts; do [ "$n" -le "$count" ] && present="$present $n"; done  # counts beyond this machine's: skipped
    [ -z "$present" ] && { say "skip $name: needs more GPUs than $count"; continue; }
    # shellcheck disable=SC2086  # the GPU counts are words
    env "${settings[@]}" python3 -m compare.scaling "${words[@]}" --gpus $present --out "$work/results/$name" \
        > "$work/results/$name.log" 2>&1
    say "end $name: exit $? after $(( $(date +%s) - began )) s"
done <<< "$runs"
say "all runs done"
touch "$work/done"
