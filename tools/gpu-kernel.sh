#!/usr/bin/env bash
# On a GPU machine: everything the kernel issues measure for one Pallas op, in one call.
# Usage: tools/gpu-kernel.sh OP OUT_DIR SDIST_DIR [BUILD_PARTS_DIR] [-- extra compare.kernels arguments]
#   OP: selective_scan (Mamba-1) or ssd (Mamba-2)
#   1. mamba-ssm's CUDA extensions: imported from BUILD_PARTS_DIR (tools/gpu-parity.sh export) or built; for ssd,
#      BUILD_PARTS_DIR "unpack" only unpacks the sdists (its Triton kernels need no build) and skips step 4
#   2. pytest -m gpu on the op's Pallas tests (against the reference and mamba-ssm) -> OUT_DIR/pytest.txt
#   3. python -m compare.kernels --op OP at the three shapes -> OUT_DIR/OP.{json,md}
#   4. model parity, 2-layer 130m-width Mamba-1 (selective_scan) or Mamba-2 (ssd) in bf16 -> OUT_DIR/p/
# Each step's output goes to a file first (a step cut short by its timeout still leaves what it printed).
set -uo pipefail
usage="usage: tools/gpu-kernel.sh OP OUT_DIR SDIST_DIR [BUILD_PARTS_DIR] [-- args]"
op=${1:?$usage}
out=${2:?$usage}
sdist=${3:?$usage}
parts=${4:-}
shift $(( $# < 4 ? $# : 4 ))
[ "${1:-}" = "--" ] && shift
case $op in
    selective_scan) tests=tests/pallas_kernels/test_selective_scan_pallas_gpu.py; model=mamba1-130m ;;
    ssd) tests=tests/pallas_kernels/test_ssd_pallas_gpu.py; model=mamba2-130m ;;
    *) echo "$usage"; exit 2 ;;
esac
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$out"
stage=build; [ -n "$parts" ] && stage="import:$parts"
[ "$parts" = unpack ] && stage=unpack && SKIP_PARITY=1
bash tools/gpu-parity.sh "$out/p" "$sdist" "$stage" > "$out/build.log" 2>&1
echo "== pytest (gpu)"
timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest -q --tb=short -m gpu -p no:cacheprovider "$tests" > "$out/pytest.txt" 2>&1
grep -v -i warning "$out/pytest.txt" | tail -n 15
echo "== kernels"
timeout "${KERNELS_TIMEOUT:-400}" python3 -m compare.kernels --op "$op" --out "$out/$op" "$@" > "$out/kernels.txt" 2>&1
grep -v -i warning "$out/kernels.txt" | grep -E "^\||^[a-z0-9.]+ "
[ -n "${SKIP_PARITY:-}" ] && exit 0
echo "== parity"
LAYER_CONFIGS=$model PARITY_TIMEOUT=200 bash tools/gpu-parity.sh "$out/p" "$sdist" layers 2>&1 | tail -n 6
