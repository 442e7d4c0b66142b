#!/usr/bin/env bash
# Training throughput beside mamba-ssm on a machine of several GPUs: one lane of runs per GPU, each lane pinned to its
# own share of the CPU cores, the runs of a lane one after the other (compare.train_throughput --steps 12 --torch:
# within a run our side, then mamba-ssm's). Run from the repository root as the device command:
#   bash tools/gpu-train-lanes.sh BUILD_PARTS_DIR "CONFIG BATCH SEQ_LEN,CONFIG BATCH SEQ_LEN" "..." ...
#   BUILD_PARTS_DIR: tools/gpu-parity.sh export's parts of mamba-ssm's CUDA build (imported, not rebuilt); mamba-ssm's
#   sdists in .sdist/. One quoted lane per GPU, its runs separated by commas. RUN_LIMIT: seconds a run (default 300).
# Files: $OUT/results-<gpu>.tgz (all runs so far, rewritten as each run of that lane ends), so that a call cut at its
# time limit still brings back the runs that finished.
set -u
usage="usage: tools/gpu-train-lanes.sh BUILD_PARTS_DIR \"CONFIG BATCH SEQ_LEN,...\" ... (one lane a GPU)"
parts=${1:?$usage}
shift
(( $# > 0 )) || { echo "$usage" >&2; exit 2; }
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
r=/tmp/train-lanes
mkdir -p $r
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > $r/gpus.txt
bash tools/gpu-parity.sh $r/build .sdist "import:$parts" > $r/import.out 2>&1
echo "import exit $? $(date +%T)" >> $r/times.txt
cores=$(( $(nproc) / $# ))
lane() {  # gpu, runs
    local gpu=$1 pin=""
    command -v taskset > /dev/null && pin="taskset -c $(( gpu * cores ))-$(( (gpu + 1) * cores - 1 ))"
    IFS=, read -r -a runs <<< "$2"
    for spec in "${runs[@]}"; do
        read -r config batch seqlen <<< "$spec"
        name=$config-L$seqlen
        CUDA_VISIBLE_DEVICES=$gpu $pin timeout "${RUN_LIMIT:-300}" python3 -m compare.train_throughput \
            --configs "$config" --steps 12 --batch_size "$batch" --seq_len "$seqlen" --torch --out $r/$name \
            > $r/$name.log 2>&1
        echo "$name gpu$gpu exit $? $(date +%T)" >> $r/times.txt
        tar -czf "$OUT/results-$gpu.tgz" -C "$(dirname $r)" "$(basename $r)"
    done
}
gpu=0
for runs in "$@"; do
    lane $gpu "$runs" &
    gpu=$(( gpu + 1 ))
done
wait
cat $r/times.txt
grep -h "^| mamba" $r/*.md
