#!/usr/bin/env bash
# Selective-scan probes on the GPU machine, stage by stage: tools/gpu-scan-probe.sh OUT STAGE ...
#   import:DIR    mamba-ssm's exported CUDA build (xz parts, torch_reference.build --export) unpacked from DIR
#   build         mamba-ssm's selective scan built from .sdist/ and exported to OUT (about 100 s)
#   bench:S:CFG;CFG...   compare.kernels --no-torch --profile at shapes S (comma-separated) with each CFG as a
#                 --pallas-config (S seconds at most: BENCH_S)
#   ncu:NAME:ARGS  ncu's sections of one forward+backward: compare.kernels.ncu_target ARGS (one quoted word, its
#                 arguments split at spaces, so that a --pallas-config keeps its commas), condensed by tools/ncu_table.py
#   tests:ARGS    tools/pytest_until_crash.py on ARGS (commas for spaces), TEST_S seconds at most
set -u
out=${1:?}
shift
export PYTHONPATH=. PYTHONUNBUFFERED=1
mkdir -p "$out"
stalls=smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_misc_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio
sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
--section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis \
--metrics $stalls,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,\
sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__sass_thread_inst_executed_op_mufu_pred_on.sum"
for stage in "$@"; do
    start=$(date +%s)
    case $stage in
        import:*) python3 -m torch_reference.build --import "${stage#import:}" --sdist-dir .sdist \
                      --extensions selective_scan_cuda > "$out/import.log" 2>&1; echo "import exit $?" ;;
        build) python3 -m torch_reference.build --sdist-dir .sdist --extensions selective_scan_cuda --jobs 8 \
                   --export "$out" > "$out/build.log" 2>&1; echo "build exit $?" ;;
        bench:*) rest=${stage#bench:}; shapes=${rest%%:*}; configs=${rest#*:}; args=()
                 IFS=';' read -ra cfgs <<< "$configs"
                 for c in "${cfgs[@]}"; do args+=(--pallas-config "$c"); done
                 name=bench$(date +%s)
                 timeout "${BENCH_S:-300}" python3 -m compare.kernels --op selective_scan --no-torch --profile \
                     --reps 5 --shapes ${shapes//,/ } "${args[@]}" --out "$out/$name" > "$out/$name.log" 2>&1
                 echo "bench exit $?"; grep -E "^[a-z0-9]+ pallas" "$out/$name.log" | grep -v "idle" | cut -c1-400 ;;
        ncu:*) rest=${stage#ncu:}; name=${rest%%:*}; targs=${rest#*:}
               timeout "${NCU_S:-200}" ncu --profile-from-start off --clock-control none \
                   --kernel-name regex:selective_scan --launch-count 8 $sections --csv --page details \
                   python3 -m compare.kernels.ncu_target $targs > "$out/ncu-$name.csv" 2> "$out/ncu-$name.err"
               echo "ncu $name exit $?"; tail -2 "$out/ncu-$name.err"
               python3 tools/ncu_table.py "$out/ncu-$name.csv" ;;
        tests:*) a=${stage#tests:}
                 timeout "${TEST_S:-240}" python3 tools/pytest_until_crash.py "$out/tests$(date +%s)" ${a//,/ } ;;
        *) echo "unknown stage $stage"; exit 2 ;;
    esac
    echo "== $stage: $(( $(date +%s) - start )) s"
done
