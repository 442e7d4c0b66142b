#!/usr/bin/env bash
# On a GPU machine: build (or import) mamba-ssm's CUDA extensions, then the parity checks against them.
# Usage: tools/gpu-parity.sh OUT_DIR SDIST_DIR [STAGE ...]
#   stages: build | export | import:DIR | unpack | layers | full | tests   (default: build layers full tests)
#   build     python -m torch_reference.build (reuses a build that exists; EXTENSIONS="selective_scan_cuda" builds
#             only what MambaVision needs, about 100 s instead of 5-6 minutes)
#   export    the built .so files + manifest, xz-compressed in 15 MB parts, to OUT_DIR (to carry to a fresh machine)
#   import:D  unpack such parts from folder D into the build cache instead of building
#   unpack    only unpack the sdists (seconds): mamba-ssm then runs its Triton SSD without the CUDA build
#   layers    compare.parity, 2-layer 130m-width Mamba-1 and Mamba-2, bf16, batch 2 x 2048: ops, logits, loss, grads
#   full      compare.parity --forward-only on the whole 130m models (24 layers): logits and loss, bf16 and fp32
#   vision    compare.parity on MambaVision-T in bf16 (batch 8, 224 px; train and eval mode) against NVlabs' package
#   graph     compare.parity on Graph-Mamba at the peptides-func config in bf16 (16 peptide-like graphs; train and
#             eval mode) against our PyTorch Graph-Mamba on mamba-ssm
#   tests     pytest -m gpu (TESTS="path ..." narrows it)
# NVlabs' mambavision wheel, if present in .whl/, is installed (--no-deps) first: it is not on the GPU image.
#   triton    export Triton's compile cache (mamba-ssm's autotuned kernels) like the build; import with triton-import:D
set -uo pipefail
out=${1:?usage: tools/gpu-parity.sh OUT_DIR SDIST_DIR [STAGE ...]}
sdist=${2:?usage: tools/gpu-parity.sh OUT_DIR SDIST_DIR [STAGE ...]}
shift 2
stages=${*:-build layers full tests}
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
if ls .whl/mambavision-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/mambavision-site .whl/mambavision-*.whl \
        && export PYTHONPATH=.:/tmp/mambavision-site
fi
log="$out/gpu-parity.log"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$log"
parity() {  # name, args...
    local name=$1; shift
    echo "== parity $name" >> "$log"
    timeout "${PARITY_TIMEOUT:-240}" python3 -m compare.parity --device cuda --out "$out/parity-$name.json" "$@" \
        2>&1 | grep -v -i warning >> "$log"
    echo "parity $name: exit ${PIPESTATUS[0]}"
    grep -A 400 "== parity $name" "$log" | grep -E "^((train|eval) )?(logits|loss) |of .* pass|Error"
}
for stage in $stages; do
    began=$(date +%s)
    case $stage in
        build) python3 -m torch_reference.build --sdist-dir "$sdist" ${EXTENSIONS:+--extensions $EXTENSIONS} \
                   >> "$log" 2>&1 ;;
        export) python3 -m torch_reference.build_parts export "$out" >> "$log" 2>&1 ;;
        unpack) python3 -m torch_reference.build --sdist-dir "$sdist" --unpack-only >> "$log" 2>&1 ;;
        import:*) python3 -m torch_reference.build --import "${stage#import:}" --sdist-dir "$sdist" \
                    ${EXTENSIONS:+--extensions $EXTENSIONS} >> "$log" 2>&1 ;;
        triton) (cd "$HOME/.triton" && tar -cf - cache) | xz -T0 -6 | split -b 15M - "$out/triton-cache.tar.xz.part-" ;;
        triton-import:*) mkdir -p "$HOME/.triton" && cat "${stage#triton-import:}"/triton-cache.tar.xz.part-* | xz -d \
                    | tar -C "$HOME/.triton" -xf - ;;
        layers) for c in ${LAYER_CONFIGS:-mamba1-130m mamba2-130m}; do
                    parity "$c-2layers-bf16" --config "$c" --n_layer 2 --dtype bfloat16 --batch 2 --seq_len 2048
                done ;;
        full) for c in mamba1-130m mamba2-130m; do
                  for d in ${FULL_DTYPES:-bfloat16 float32}; do
                      parity "$c-full-$d" --config "$c" --dtype "$d" --batch 2 --seq_len 2048 --forward-only
                  done
              done ;;
        vision) parity mambavision-T-bf16 --config mambavision-T --dtype bfloat16 --batch 8 --seq_len 224 ;;
        graph) parity graph-mamba-peptides-func-bf16 --config graph-mamba-peptides-func --dtype bfloat16 --batch 16 ;;
        tests) echo "== gpu tests" >> "$log"
               timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest -q -m gpu ${TESTS:-tests} -p no:cacheprovider \
                   >> "$log" 2>&1
               echo "gpu tests: exit $?"; tail -n 4 "$log" ;;
        *) echo "unknown stage $stage" | tee -a "$log"; exit 2 ;;
    esac
    echo "stage $stage: $(( $(date +%s) - began )) s" | tee -a "$log"
done
