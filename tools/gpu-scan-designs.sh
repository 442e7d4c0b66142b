#!/usr/bin/env bash
# On a GPU machine: the selective scan's designs side by side in one call.
# Usage: tools/gpu-scan-designs.sh OUT_DIR SDIST_DIR [-- extra compare.kernels arguments]
#   1. mamba-ssm's selective_scan_cuda built in the background (about 100-180 s) while
#   2. pytest -m gpu runs the selective scan's GPU tests against the oracle (every design; TESTS_K=EXPR narrows
#      them as pytest -k); SKIP_TESTS=1 skips them and the mamba-ssm test after the build
#   3. python -m compare.kernels --op selective_scan with the given arguments -> OUT_DIR/selective_scan.{json,md}
# A build killed halfway leaves torch's build lock behind, and the next build would wait on it for ever: stale
# locks are removed first.
set -uo pipefail
usage="usage: tools/gpu-scan-designs.sh OUT_DIR SDIST_DIR [-- args]"
out=${1:?$usage}
sdist=${2:?$usage}
shift 2
[ "${1:-}" = "--" ] && shift
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$out"
find "${JAX_MAMBA_TORCH_CACHE:-$HOME/.cache/jax-mamba/torch}" -name lock -delete 2>/dev/null
EXTENSIONS=selective_scan_cuda bash tools/gpu-parity.sh "$out/p" "$sdist" build > "$out/build.log" 2>&1 &
build=$!
if [ -z "${SKIP_TESTS:-}" ]; then
echo "== pytest (gpu, oracle)"
timeout "${TESTS_TIMEOUT:-240}" python3 -m pytest -q --tb=short -m gpu -p no:cacheprovider \
    tests/pallas_kernels/test_selective_scan_pallas_gpu.py -k "oracle and ${TESTS_K:-oracle}" > "$out/pytest-oracle.txt" 2>&1
grep -v -i warning "$out/pytest-oracle.txt" | tail -n 12
fi
wait $build
tail -n 3 "$out/build.log"
if [ -z "${SKIP_TESTS:-}" ]; then
echo "== pytest (gpu, mamba-ssm)"
timeout "${TESTS_TIMEOUT:-240}" python3 -m pytest -q --tb=short -m gpu -p no:cacheprovider \
    tests/pallas_kernels/test_selective_scan_pallas_gpu.py -k "not oracle" > "$out/pytest-mamba.txt" 2>&1
grep -v -i warning "$out/pytest-mamba.txt" | tail -n 8
fi
echo "== kernels"
timeout "${KERNELS_TIMEOUT:-400}" python3 -m compare.kernels --op selective_scan --out "$out/selective_scan" "$@" \
    > "$out/kernels.txt" 2>&1
grep -v -i warning "$out/kernels.txt" | grep -E "^\||^[a-z0-9.]+ |Error"
