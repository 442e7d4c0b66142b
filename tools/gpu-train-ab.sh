#!/usr/bin/env bash
# On one GPU: a change's effect on training throughput and its ratio to mamba-ssm, in one call. For each run, the
# base tree's JAX alone, then this tree's JAX with PyTorch beside it (compare.train_throughput --torch).
# Usage: tools/gpu-train-ab.sh BASE_TREE OUT_DIR SDIST_DIR BUILD_PARTS_DIR RUN...
#   BASE_TREE: the base commit's packages (`git archive BASE compare jax_mamba pallas_kernels torch_reference
#              pyproject.toml | tar -x -C BASE_TREE`; carry it, e.g. under .scratch)
#   BUILD_PARTS_DIR: tools/gpu-parity.sh export's parts of mamba-ssm's CUDA build (imported, not rebuilt)
#   RUN: NAME=ARGS, e.g. "m2-780m=--configs mamba2-780m --steps 12": compare.train_throughput's arguments
# Writes OUT_DIR/NAME-{base,this}.{json,md,log}; prints each side's table row.
set -uo pipefail
usage="usage: tools/gpu-train-ab.sh BASE_TREE OUT_DIR SDIST_DIR BUILD_PARTS_DIR NAME=ARGS..."
base=$(cd "${1:?$usage}" && pwd)
out=$(realpath -m "${2:?$usage}")
sdist=${3:?$usage}
parts=${4:?$usage}
shift 4
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
here=$(pwd)
mkdir -p "$out"
PYTHONPATH=. bash tools/gpu-parity.sh "$out/build" "$sdist" "import:$parts" > "$out/build.log" 2>&1
echo "extensions: exit $?"
for run in "$@"; do
    name=${run%%=*}
    read -r -a args <<< "${run#*=}"
    for side in base this; do
        tree=$here extra=(--torch)
        [ "$side" = base ] && tree=$base extra=()
        echo "== $name $side $(date +%T)"
        (cd "$tree" && PYTHONPATH=$tree python3 -m compare.train_throughput "${args[@]}" "${extra[@]}" \
            --out "$out/$name-$side" > "$out/$name-$side.log" 2>&1)
        echo "exit $?"
        grep -E "^\| (mamba|hybrid)" "$out/$name-$side.md" 2>/dev/null | cut -c1-200
    done
done
