#!/usr/bin/env bash
# On a GPU machine: everything issue 4 measures for the Pallas selective scan, in one call.
# Usage: tools/gpu-selective-scan.sh OUT_DIR SDIST_DIR [BUILD_PARTS_DIR] [-- extra compare.kernels arguments]
#   1. mamba-ssm's CUDA extensions: imported from BUILD_PARTS_DIR (tools/gpu-parity.sh export) or built
#   2. pytest -m gpu on the Pallas selective-scan tests (against the reference and mamba-ssm)
#   3. python -m compare.kernels --op selective_scan at the three shapes -> OUT_DIR/selective_scan.{json,md}
#   4. model parity, 2-layer 130m-width Mamba-1 in bf16 with impl=pallas against mamba-ssm -> OUT_DIR/p/
set -uo pipefail
out=${1:?usage: tools/gpu-selective-scan.sh OUT_DIR SDIST_DIR [BUILD_PARTS_DIR] [-- args]}
sdist=${2:?usage: tools/gpu-selective-scan.sh OUT_DIR SDIST_DIR [BUILD_PARTS_DIR] [-- args]}
parts=${3:-}
shift $(( $# < 3 ? $# : 3 ))
[ "${1:-}" = "--" ] && shift
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$out"
stage=build; [ -n "$parts" ] && stage="import:$parts"
bash tools/gpu-parity.sh "$out/p" "$sdist" "$stage" > "$out/build.log" 2>&1
echo "== pytest (gpu)"; timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider \
    tests/pallas_kernels/test_selective_scan_pallas_gpu.py 2>&1 | grep -E "passed|failed|Error|assert" | tail -n 8
echo "== kernels"; timeout 400 python3 -m compare.kernels --op selective_scan --out "$out/selective_scan" "$@" \
    2>&1 | grep -v -i warning | grep -E "^\||^[a-z0-9.]+ " 
echo "== parity"; LAYER_CONFIGS=mamba1-130m PARITY_TIMEOUT=200 bash tools/gpu-parity.sh "$out/p" "$sdist" layers 2>&1 | tail -n 6
