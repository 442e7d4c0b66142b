#!/usr/bin/env bash
# On a GPU machine: set up the PyTorch side, run a list of commands one after another within a deadline, and pack
# what they wrote. The general runner for measurements (compare.throughput, compare.kernels,
# compare.characterize, ...), so that a measurement is a list of commands, not a script of its own.
# Usage: tools/gpu-run.sh OUT_DIR [COMMAND ...]
#   Each COMMAND is one shell command line, run from the repository root; it writes its results under $RESULTS
#   (OUT_DIR/results), e.g. 'python3 -m compare.throughput --configs mamba2-130m --torch --out $RESULTS/tp'.
#   Its output goes to logs/NN.log (packed too); each command's exit status and wall time are printed as it ends.
# Environment:
#   BUILD_PARTS=DIR  mamba-ssm's and causal-conv1d's CUDA extensions exported by `tools/gpu-convergence.sh OUT export`
#                    (xz parts), unpacked instead of building; unset: `python -m torch_reference.build` builds them
#                    from .sdist/ (about 7 minutes); BUILD_PARTS=none skips the PyTorch side's set-up
#   EXTENSIONS=...   build only these (e.g. selective_scan_cuda, about 100 s: mamba-ssm's selective scan alone)
#   DEADLINE=S       seconds from the start after which no command starts and a running one is stopped (default 540,
#                    inside one 10-minute call); the results are packed either way
# NVlabs' mambavision and mamba3-jax wheels, if present in .whl/, are installed (--no-deps) on the path first: the GPU
# image lacks them.
# Carry .sdist/, .whl/ and the parts folder. Everything under $RESULTS comes back in OUT_DIR/results.tar.gz.
set -uo pipefail
out=${1:?usage: tools/gpu-run.sh OUT_DIR [COMMAND ...]}
shift
began=$(date +%s)
deadline=$(( began + ${DEADLINE:-540} ))
export RESULTS="$out/results" PYTHONUNBUFFERED=1 PYTHONPATH=.
mkdir -p "$RESULTS" "$out/logs"
if ls .whl/mambavision-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/mambavision-site .whl/mambavision-*.whl \
        $(ls .whl/mamba3_jax-*.whl 2>/dev/null) \
        && export PYTHONPATH=.:/tmp/mambavision-site
fi
case ${BUILD_PARTS:-} in
    none) ;;
    "") python3 -m torch_reference.build --sdist-dir .sdist ${EXTENSIONS:+--extensions $EXTENSIONS} \
            > "$out/logs/build.log" 2>&1; echo "build: exit $?" ;;
    *) python3 -m torch_reference.build --import "$BUILD_PARTS" --sdist-dir .sdist > "$out/logs/build.log" 2>&1
       echo "import of the build: exit $?" ;;
esac
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
n=0
for command in "$@"; do
    n=$(( n + 1 ))
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt 10 ]; then
        echo "[$n] not started (deadline): $command"
        continue
    fi
    start=$(date +%s)
    timeout "$left" bash -c "$command" > "$out/logs/$(printf %02d $n).log" 2>&1
    echo "[$n] exit $? after $(( $(date +%s) - start )) s: $command"
done
tar -C "$out" -czf "$out/results.tar.gz" results logs && rm -rf "$RESULTS" "$out/logs"
