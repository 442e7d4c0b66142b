#!/usr/bin/env bash
# On a GPU machine with mamba-ssm built or imported (tools/gpu-parity.sh OUT SDIST import:DIR): mamba-ssm's Triton SSD
# forward and backward launched from JAX (impl="mamba_ssm_triton"): its GPU test, every case in its own process at once
# (a case autotunes every config of about fifteen kernels in both frameworks, mostly compiling on the CPU: about four
# minutes a case, four at once on an H100 machine; the test times nothing), then the SSD kernel benchmark and the SSD
# forward variants with it. CASES="pytest -k expression" narrows the test.
# Usage: tools/gpu-jax-triton.sh OUT_DIR   (jax-triton 0.3.1's wheel in .whl/; it imports only where JAX has a GPU)
#   TEST_LIMIT seconds for each test case (default 300); BENCH_LIMIT seconds for each benchmark (default 240)
set -uo pipefail
out=${1:?usage: tools/gpu-jax-triton.sh OUT_DIR}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/jax-triton-site .whl/jax_triton-*.whl || exit 1
export PYTHONPATH=.:/tmp/jax-triton-site PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
test=tests/torch_reference/test_ssd_jax_triton_gpu.py
mapfile -t cases < <(python3 -m pytest -p no:cacheprovider --collect-only -q -k "${CASES:-}" "$test" | grep "::")
for i in "${!cases[@]}"; do
    timeout "${TEST_LIMIT:-300}" python3 -m pytest -p no:cacheprovider -rA --tb=short -v "${cases[$i]}" \
        > "$out/test-$i.log" 2>&1 &
done
wait
grep -hE "PASSED|FAILED|Error|error [0-9]" "$out"/test-*.log | grep -v -i warn | head -40
timeout "${BENCH_LIMIT:-240}" python3 -m compare.kernels --op ssd --shapes 130m --impls pallas mamba_ssm_triton \
    --reps 15 --out "$out/ssd-jax-triton" > "$out/kernels.log" 2>&1
echo "kernels: exit $?"; grep -E "^\| 130m" "$out/ssd-jax-triton.md" 2>/dev/null
timeout "${BENCH_LIMIT:-240}" python3 -m compare.ssd_forward_variants --torch --out "$out/questions" > "$out/variants.log" 2>&1
echo "variants: exit $?"; grep -E "^\| (fused|split|mamba)" "$out/questions/ssd-forward-variants.md" 2>/dev/null | head -8
