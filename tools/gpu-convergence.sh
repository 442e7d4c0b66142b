#!/usr/bin/env bash
# On a GPU machine: training-curve reproducibility and parity runs, as many processes at once as the GPU holds.
# Usage: tools/gpu-convergence.sh OUT_DIR STAGE ...
#   build        mamba-ssm's and causal-conv1d's CUDA extensions from .sdist/ (background; `wait-build` joins it)
#   export       the built extensions, xz-compressed in 15 MB parts, to OUT_DIR (to carry to a fresh machine)
#   import:DIR   unpack such parts from DIR instead of building
#   tries        JAX: the same seed TRIES times on each tree of TREES (NAME=FOLDER pairs, a folder holding a
#                checkout; default current=.), CONFIG for STEPS steps with ARGS (config overrides): do runs of one tree
#                differ?
#   det-tries    the same on this tree under XLA_FLAGS=--xla_gpu_deterministic_ops=true
#   determinism  compare.convergence.determinism: our gradient of one batch REPEATS times in one process, in two processes
#                (default flags) and one under the deterministic-ops flag
#   torch-tries  mamba-ssm (torch_reference.train_curve) from seed 0's weights, TRIES times (needs the build)
#   torch-determinism   compare.convergence.determinism --framework torch (needs the build)
#   curves:NAME  compare.convergence --config NAME --steps STEPS ARGS, its processes JOBS at a time (needs the build)
#   verdicts     the committed verdicts (benchmarks/convergence/): compare.convergence over 1000 steps, bf16, for
#                VERDICTS (default all five): mamba1-130m (lr 6e-4), mamba2-130m and hybrid-130m (their configs' lr
#                3e-3), all batch 4 x 512 and warmup 100; mamba1-130m-lr3e-3 (the config's lr, at which every run of
#                both frameworks blows up near the peak; 6 seeds); mambavision-T (batch 32, AdamW lr 1e-3, warmup 100,
#                no stochastic depth); all at once, JOBS processes each; 3 seeds unless said. Runs kept in RESUME_DIR
#                (NAME.partial.json of an interrupted call, or a finished NAME.json to add seeds to) are not run again
#   deadline:S   after S seconds, stop every run still going (so that `pack` still runs inside a call's limit)
#   wait         wait for every background stage
#   pack         results (metrics, JSON, reports, plots, logs) into OUT_DIR/results.tar.gz
# Background stages log to OUT_DIR/logs/; each JAX process takes a slice of the GPU's memory (MEM_FRACTION). Carry
# .sdist/ (the two sdists, for build), .whl/ (NVlabs' mambavision wheel) and the folder of exported parts.
# All verdicts at once outlast one 10-minute call on a one-GPU H200 machine (16 cores): the finished runs are kept in
# NAME.partial.json, so a later call with RESUME_DIR holding them resumes.
set -uo pipefail
out=${1:?usage: tools/gpu-convergence.sh OUT_DIR STAGE ...}
shift
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=${MEM_FRACTION:-0.08}
if ls .whl/mambavision-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/mambavision-site .whl/mambavision-*.whl \
        && export PYTHONPATH=.:/tmp/mambavision-site
fi
CONFIG=${CONFIG:-mamba1-130m} STEPS=${STEPS:-200} TRIES=${TRIES:-3} REPEATS=${REPEATS:-3} JOBS=${JOBS:-6}
ARGS=${ARGS:---warmup_steps=20 --batch_size=4 --seq_len=1024}
TREES=${TREES:-current=.}
runs=/tmp/convergence-runs
mkdir -p "$out/logs" "$runs"
build_pid=

jax_run() {  # tree, name, extra env...: one jax_mamba.train run of CONFIG, its metrics under $runs/name
    local tree=$1 name=$2; shift 2
    (cd "$tree" && env "$@" python3 -m jax_mamba.train --config "$CONFIG" --run_dir="$runs/$name" --max_steps="$STEPS" \
        --seed=0 --log_every=1 --eval_every="$STEPS" --save_every="$STEPS" --eval_batches=1 --progress=false \
        --sample_tokens=0 $ARGS) > "$out/logs/$name.log" 2>&1
    echo "$name: exit $?"
}

lm="--warmup_steps=100 --batch_size=4 --seq_len=512"  # the language models' verdict settings
verdict() {  # config, name, overrides (one word list), more arguments: compare.convergence over 1000 steps
    local config=$1 name=$2 overrides=$3; shift 3
    [ -n "${RESUME_DIR:-}" ] && cp "$RESUME_DIR/$name".json "$RESUME_DIR/$name".partial.json "$runs/" 2>/dev/null
    python3 -m compare.convergence --config "$config" --steps 1000 --jobs "$JOBS" --resume --out "$runs/$name" "$@" \
        $overrides > "$out/logs/verdict-$name.log" 2>&1 &
}

for stage in "$@"; do
    echo "== $stage $(date +%T)"
    case $stage in
        build) python3 -m torch_reference.build --sdist-dir .sdist --jobs 12 > "$out/logs/build.log" 2>&1 &
               build_pid=$! ;;
        wait-build) [ -n "$build_pid" ] && wait "$build_pid"; echo "build: exit $?" ;;
        export) python3 -m torch_reference.build_parts export "$out" ;;
        import:*) python3 -m torch_reference.build --import "${stage#import:}" --sdist-dir .sdist \
                      > "$out/logs/build.log" 2>&1
                  echo "import: exit $?" ;;
        tries) for tree in $TREES; do
                   for t in $(seq 1 "$TRIES"); do
                       jax_run "${tree#*=}" "jax-${tree%%=*}-try$t" &
                   done
               done ;;
        det-tries) for t in $(seq 1 "$TRIES"); do
                       jax_run . "jax-current-deterministic-ops-try$t" XLA_FLAGS=--xla_gpu_deterministic_ops=true &
                   done ;;
        determinism)
            for p in a b; do
                python3 -m compare.convergence.determinism --config "$CONFIG" --repeats "$REPEATS" --out "$runs/det-jax-$p" $ARGS \
                    > "$out/logs/det-jax-$p.log" 2>&1 &
            done
            XLA_FLAGS=--xla_gpu_deterministic_ops=true python3 -m compare.convergence.determinism --config "$CONFIG" \
                --repeats "$REPEATS" --out "$runs/det-jax-detops" $ARGS > "$out/logs/det-jax-detops.log" 2>&1 & ;;
        torch-tries) for t in $(seq 1 "$TRIES"); do
                         python3 -m torch_reference.train_curve --config "$CONFIG" --steps "$STEPS" --seed=0 $ARGS \
                             > "$runs/torch-try$t.json" 2> "$out/logs/torch-try$t.log" &
                     done ;;
        torch-determinism)
            python3 -m compare.convergence.determinism --config "$CONFIG" --framework torch --repeats "$REPEATS" \
                --out "$runs/det-torch" $ARGS > "$out/logs/det-torch.log" 2>&1 & ;;
        curves:*) name=${stage#curves:}
                  python3 -m compare.convergence --config "$name" --steps "$STEPS" --jobs "$JOBS" \
                      --out "$runs/curves-$name" $ARGS > "$out/logs/curves-$name.log" 2>&1 &
                  ;;
        deadline:*) (sleep "${stage#deadline:}"; pkill -f 'python3 -m (jax_mamba|torch_reference|compare)\.') &
                    disown ;;
        verdicts) for v in ${VERDICTS:-mamba1-130m mamba1-130m-lr3e-3 mamba2-130m hybrid-130m mambavision-T}; do
                      case $v in
                          mamba1-130m) verdict mamba1-130m "$v" "$lm" --lr=6e-4 ;;
                          mamba1-130m-lr3e-3) verdict mamba1-130m "$v" "$lm" --seeds 6 ;;
                          mamba2-130m|hybrid-130m) verdict "$v" "$v" "$lm" ;;
                          mambavision-T) verdict "$v" "$v" "--optim.name=adamw --lr=1e-3 --warmup_steps=100 \
                                             --batch_size=32 --model.drop_path_rate=0" ;;
                          *) echo "unknown verdict $v"; exit 2 ;;
                      esac
                  done ;;
        wait) wait; echo "all background stages done" ;;
        pack) tar -C "$runs" -czf "$out/results.tar.gz" --exclude='*checkpoint*' --exclude='*.npz' \
                  $(cd "$runs" && find . -name 'metrics.jsonl' -o -name '*.json' -o -name '*.md' -o -name '*.png' \
                      | grep -v /checkpoints/) \
                  -C "$out" logs ;;
        *) echo "unknown stage $stage"; exit 2 ;;
    esac
done
