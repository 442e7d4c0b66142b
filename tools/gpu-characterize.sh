#!/usr/bin/env bash
# On a GPU machine with mamba-ssm built or imported (tools/gpu-parity.sh OUT SDIST import:DIR): the characterization
# report of each config, both frameworks, with Nsight Compute counters of a shallower copy of each training step
# (ncu replays every launch; a layer's kernels are the same at any depth), then reports/SUMMARY.md.
# Usage: tools/gpu-characterize.sh [CONFIG ...]   (default: the five below)
#   LIMIT  seconds per config (default 420); NCU_LIMIT seconds per framework's ncu run (default 150)
#   ARGS   more arguments for every compare.characterize call (e.g. --framework=torch)
# MambaVision's PyTorch side needs NVlabs' mambavision package on the path (its wheel in .whl/, as for gpu-parity).
set -uo pipefail
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
if ls .whl/mambavision-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/mambavision-site .whl/mambavision-*.whl \
        && export PYTHONPATH=$PYTHONPATH:/tmp/mambavision-site
fi
shallow() {  # the counted step's overrides per config
    case $1 in
        mamba1-*|mamba2-*) echo "--ncu-override n_layer=2" ;;
        hybrid-*) echo "--ncu-override n_layer=2 --ncu-override attn_layer_idx=[1]" ;;
        mambavision-*) echo "--ncu-override depths=[1,1,2,2]" ;;
        graph-mamba-*) echo "--ncu-override n_layers=2" ;;
    esac
}
configs=${*:-mamba1-130m mamba2-130m hybrid-130m mambavision-T graph-mamba-cluster}
for cfg in $configs; do
    began=$(date +%s)
    # shellcheck disable=SC2046  # the overrides are words
    timeout "${LIMIT:-420}" python3 -m compare.characterize --config "$cfg" --steps 4 --ncu $(shallow "$cfg") \
        --ncu-timeout "${NCU_LIMIT:-150}" ${ARGS:-} 2>&1 | grep -v -i warn | grep -E "^(profiling|ncu|jax|torch|wrote|\| (GEMM|SSM|DRAM))"
    echo "$cfg: exit ${PIPESTATUS[0]} after $(( $(date +%s) - began )) s"
done
python3 -m compare.characterize.summary
