#!/usr/bin/env bash
# A/B of two code versions on one GPU: the same command run in a base tree and in this one, alternately (base, this,
# base, this), so that drift of the machine shows as a spread between the two runs of each side.
# Usage: tools/gpu-ab.sh BASE_TREE OUT_PREFIX COMMAND ARGS...
#   BASE_TREE: the base commit's files (`git archive BASE | tar -x -C BASE_TREE` here; carry it, e.g. under .scratch)
#   COMMAND gets `--out OUT_PREFIX-{base,this}-{1,2}` appended (compare.kernels, compare.train_throughput, ...) and
#   runs with PYTHONPATH set to its tree; its output goes to the same path with .log.
set -uo pipefail
usage="usage: tools/gpu-ab.sh BASE_TREE OUT_PREFIX COMMAND ARGS..."
base=${1:?$usage}
out=$(realpath -m "${2:?$usage}")
shift 2
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
[ -d "$base" ] || { echo "BASE_TREE $base: no such folder" >&2; exit 2; }
here=$(pwd)
for round in 1 2; do
    for side in base this; do
        tree=$here
        [ "$side" = base ] && tree=$(cd "$base" && pwd)
        echo "== $side $round $(date +%T)"
        (cd "$tree" && PYTHONPATH=$tree "$@" --out "$out-$side-$round" > "$out-$side-$round.log" 2>&1)
        echo "exit $?"
    done
done
