#!/usr/bin/env bash
# Issue 15's open SSD checks on one GPU, each shape's variants in one process (median of 10), mamba-ssm's Triton SSD
# beside them where a run says --torch: run from the repository root as the device command,
# `bash tools/gpu-issue15-probe.sh RUN ...`, files in $OUT/issue15-probe.tgz. Needs mamba-ssm's sdist in .sdist/ (its
# Triton SSD only: the `unpack` stage of tools/gpu-parity.sh, no CUDA build). The runs (the last two rounds: the
# backward's per-head and dB/dC kernels on Mosaic GPU, SsdConfig.bwd_dx_mosaic and bwd_dbc_mosaic, defaults on Hopper;
# earlier rounds' runs are in this file's history):
#   mcheck: the compiled oracle tests of the Mosaic GPU kernels (pytest -m gpu -k mosaic_kernels)
#   The m* runs below set bwd_dx_mosaic=0 (the Triton kernel) beside the default (the Mosaic GPU kernel on Hopper);
#   when they first ran the default was Triton and they set bwd_dx_mosaic=1. Their files hold the version of the
#   kernel they ran then (ssd-notes.md, eighteenth and nineteenth rounds); rerun, they time the committed one.
#   mfirst: 130m and the long shape, no mamba-ssm (first ran the first version)
#   mheads (removed with its kernel): 130m, the long shape and B4 L16384 H64 G8 with a Mosaic GPU kernel taking up
#           to 2, 8 and 32 heads a program (two load slots: the next head's loads during this head's math)
#   mncu: ncu on one launch of the Mosaic GPU kernel at 130m (occupancy, launch, warp states, memory)
#   mverify: beside mamba-ssm: 130m, the long shape, B4 L16384 H64 G8 and 2.7b (first ran version 4)
#   mother: no mamba-ssm; N 256 (B2 L8192 H32 G4), N 64 (B4 L4096 H32 G2), B16 L512 H8 and P 128 (B2 L2048 H32)
#           (first ran version 4)
#   mtests: the compiled Mosaic oracle tests and 130m against the reference and mamba-ssm, Mosaic and Triton kernels
#           (run alone: up to 570 s)
#   mfinal: 130m and the long shape, no mamba-ssm (first ran the committed version, after M's tile became the one
#           Mᵀ dy reads, transposed; its tests, then part of this run, were cut at 300 s during the 130m test)
#   mdefault: beside mamba-ssm: 130m, the long shape and 2.7b, the default (Mosaic GPU from this round) against the
#           Triton kernel (first ran the committed version)
#   dtests: the dB/dC kernel on Mosaic GPU (SsdConfig.bwd_dbc_mosaic, then opt-in): the compiled oracle tests of
#           both Mosaic kernels and 130m against the reference and mamba-ssm with both (run alone: up to 570 s; not
#           run: mcheck, then dparity, ran the same tests in two calls)
#   dfirst: the dB/dC kernel on 128 and on 64 of N's columns beside the default, with the profiler's per-kernel
#           times: 130m, the long shape, B4 L16384 H64 G8 and N 256 (B2 L8192 H32 G4), no mamba-ssm (not run:
#           dquick and dverify took its place)
#   dquick: the dB/dC kernel on Mosaic GPU beside the then default (the Triton one) at 130m and the long shape,
#           per-kernel times
#   dverify: beside mamba-ssm, the default (both Mosaic GPU kernels from this round) against the Triton dB/dC kernel
#           and against 64 of N's columns: 130m, the long shape, 2.7b, B4 L16384 H64 G8 and N 256 (B2 L8192 H32 G4)
#   dverify2: dverify's last two shapes (dverify ran past its 560 s after 2.7b, mamba-ssm autotuning)
#   dparity: 130m against the reference and mamba-ssm with both Mosaic GPU kernels (the model-level parity test)
#   dother: the default (both Mosaic GPU kernels) against the Triton dB/dC kernel at six other shapes, no mamba-ssm
#   msingle: 130m, the long shape and B4 L16384 H64 G8 with the profiler's per-kernel times (first ran versions 3
#           and 4)
#   The w* runs: the forward's fused walk on Mosaic GPU (SsdConfig.fwd_mosaic, opt-in when they first ran):
#   wcheck: its compiled oracle tests (pytest -m gpu -k mosaic_forward)
#   wfirst: the walk beside the default at 130m, 2.7b, the long shape and B4 L16384 H64 G8, no mamba-ssm
#   wn256: N 256 (B2 L8192 H32 G4) and B1 L16384 H24: the walk whole, and per segment of 1024 and 512 positions (the
#          backward one-level), beside the default, no mamba-ssm
#   (then the walk became the default on Hopper where it covers the shape, N 256 included, and overlaps its products)
#   wverify, wverify2: beside mamba-ssm, the default against the Triton forward (fwd_mosaic=0): 130m, 2.7b, N 256
#          (B2 L8192 H32 G4); the long shape and B4 L16384 H64 G8
#   wn256t, wlong: wverify's last shape (it ran past its 380 s there) and wverify2's shapes without mamba-ssm
#   wother: the same without mamba-ssm at six other shapes; wn256b: B8 L2048 H24 N256 against the split forward
#   The s* runs: the sequential state passes (both ways) on Mosaic GPU (SsdConfig.states_mosaic, opt-in when they first
#   ran):
#   scheck: the compiled oracle tests of the forward's walk and the state passes (pytest -m gpu -k mosaic_forward)
#   sfirst: the state passes on Mosaic GPU beside the default at 130m, the long shape, 2.7b and B1 L16384 H24, with
#           the profiler's per-kernel times, no mamba-ssm
#   sother: the same at six other shapes (N 64 and 256, P 128, G 8, L 131072), no profiler
#   (then the state passes on Mosaic GPU became the default on Hopper where they cover the shape)
#   sverify, sverify2: beside mamba-ssm, the default against the Triton state passes (states_mosaic=0): 130m, the
#          long shape and 2.7b; N 256 (B2 L8192 H32 G4) and B4 L16384 H64 G8
#   sparity: 130m against the reference and mamba-ssm with the default (every Mosaic GPU kernel)
#   snames: 130m and the long shape with the profiler, after the Mosaic GPU kernels were named (kernel_name)
#   fncu: ncu on one launch of the forward's walk, forward only, at N 256 (B2 L8192 H32 G4), 130m and 2.7b: warp
#         states, pipes, and each SASS instruction's stall samples (ssd_fwd_walk-SHAPE.{txt,csv}, the .ncu-rep files;
#         FNCU_CASES="NAME:batch,L,H,P,N,G ..." other shapes)
#   The f* runs: the forward's walk with y's diagonal product from registers (no M or X tiles in shared memory) and
#   SsdConfig.fwd_walk_stages:
#   fcheck: its compiled oracle tests (pytest -m gpu -k mosaic_forward)
#   fnew: the walk on one pipeline stage beside two (the default) at 130m, 2.7b, the long shape, N 256 (B2 L8192 H32
#         G4, B8 L2048 H24), no mamba-ssm
#   fbase: fnew's shapes with the package from $BASE (pallas_kernels of the commit before, e.g. `git archive b9044ac
#          pallas_kernels | tar -x -C DIR`, carried)
#   (then out left from the staged update's tile with no wait at the block's end, and default_config's stage rule)
#   fverify: beside mamba-ssm, the default: 130m, 2.7b, N 256 (B2 L8192 H32 G4) and the long shape (cut at 420 s
#            during our long-shape run)
#   flong: the long shape beside mamba-ssm, the default
#   The g* and h* runs (removed: they need the package of commit f95e9df, whose two options the next commit took out
#   again; the runs are in that commit's copy of this file): the walk's diagonal W formed before the state's products
#   (SsdConfig.fwd_walk_diagonal_first):
#   gcheck: the compiled oracle tests of the forward's walk (pytest -m gpu -k mosaic_forward)
#   gptxas: ptxas's register and spill report of the walk (MOSAIC_GPU_DUMP_PTXAS) at N 256 and 128, W first or not
#   gfirst: W first beside the default at N 256 (B2 L8192 H32 G4, B8 L2048 H24, B1 L16384 H24), 130m and 2.7b, with
#           the profiler's per-kernel times, no mamba-ssm
#   The h* runs: the walk's state in halves of N on two warpgroups (SsdConfig.fwd_walk_warpgroups=2, a third
#   warpgroup issuing the copies):
#   hcheck: the compiled oracle tests of the forward's walk, these cases too
#   hptxas: ptxas's register and spill report of that walk at N 256 and 128
#   hfirst: two warpgroups beside the default at gfirst's shapes, no mamba-ssm
#   nprof: the default at three N 256 shapes with the profiler's per-kernel times, no mamba-ssm
#   The z* runs (removed: they need the package of commit 51b1f9f, whose option the next commit took out again; the
#   runs are in that commit's copy of this file): the walk with z read and the pre-gate output written between
#   registers and global memory (SsdConfig.fwd_walk_gate_direct), meant to let two programs share an SM at N 256:
#   zfirst: beside mamba-ssm and the default at three N 256 shapes, 2.7b and 130m (cut at 340 s during 2.7b)
#   zcheck: the compiled oracle tests of the forward's walk (pytest -m gpu -k mosaic_forward)
#   The n* runs (removed: they need the package of commit bf25195, whose option the next commit took out again; the
#   runs are in that commit's copy of this file): the walk on 32 head dims a program with the state transposed
#   (SsdConfig.fwd_walk_head_dims=32, kernel_fwd_mosaic_narrow), meant to let two programs share an SM at N 256:
#   nfirst: beside mamba-ssm and the default at three N 256 shapes (cut at 300 s after their timings)
#   ncheck: the compiled oracle tests of the forward's walk (pytest -m gpu -k mosaic_forward; cut at 240 s)
#   The p* runs: the walk's B and C in pieces of N's columns by a hand-made loop (SsdConfig.fwd_walk_pieces):
#   pcheck: the compiled oracle tests of the forward's walk (pytest -m gpu -k mosaic_forward)
#   pfirst: two and four pieces beside the default at three N 256 shapes, no mamba-ssm
#   pn128: two pieces beside the default at 130m, 2.7b, the long shape and B4 L16384 H64 G8, no mamba-ssm
#   pverify: two pieces beside the default and mamba-ssm at three N 256 shapes
#   (then two pieces became the default at N 256)
#   pdefault: beside mamba-ssm, the default: three N 256 shapes and 130m
#   pcheck2: the compiled oracle tests of the walk in pieces (pytest -m gpu -k "mosaic_forward and pieces")
#   pncu: ncu's throughputs (SpeedOfLight, MemoryWorkloadAnalysis) of one launch of the N 256 walk (B2 L8192 H32 G4
#         and B8 L2048 H24, forward only), the default and two pieces
#   The q* runs (removed: they need the package of commit 05b4663, whose option the next commit took out again; the
#   runs are in that commit's copy of this file): two heads of a group a walk program, one warpgroup each, sharing B
#   and C (SsdConfig.fwd_walk_heads):
#   qcheck: the compiled oracle tests of the walk in pieces or in two heads (pytest -m gpu -k "mosaic_forward and
#           (pieces or heads)")
#   qfirst: two heads beside the default at three N 256 shapes, on the default's segments and on segments of 512
#           (1024 too at B8 L2048, whose default is one walk a sequence), no mamba-ssm (cut at 280 s while timing the
#           EXTRA_SHAPES it did not name, which compare.kernels times after the named ones; B4 L16384 H64 G8 finished)
#   qptxas: ptxas's register and spill report of the walk at N 256, one head and two, and at N 128 with two
#   qn128: two heads (B and C whole or in two pieces) beside the default at five N 128 shapes, no mamba-ssm (cut at
#          330 s during its fourth shape)
#   qother: two heads beside the default at five other shapes (N 64 and 128, P 128, L 512-131072), no mamba-ssm
#           (cut at 300 s after them and B4 L16384 H64 G8)
#   qncu: ncu's local-memory (spill) traffic and its L1 hit rate in one launch of the N 256 walk (B2 L8192 H32 G4,
#         forward only), one head a program and two
#   The r* runs: the walk's state in halves of N on two warpgroups, each with its halves of B and C two blocks ahead
#   (SsdConfig.fwd_walk_warpgroups=2, kernel_fwd_mosaic_halves):
#   rfirst: halves beside the default at three N 256 shapes, no mamba-ssm (cut at 150 s while timing the EXTRA_SHAPES
#           it did not name, after its own three)
#   rcheck: the compiled oracle tests of the walk in halves (pytest -m gpu -k "mosaic_forward and halves")
#   rverify: halves beside the default and mamba-ssm at B2 L8192 H32 N256 G4 (cut at 93 s, the session's last device
#            time, before its first timing)
#   (then the r* runs' option came back, its interpret cases given the CPU threads they need, and became the default
#   at N 256 in place of two pieces)
#   The h* runs: the walk's state in halves on two warpgroups, the default at N 256:
#   hcheck: the compiled oracle tests of the walk in halves (pytest -m gpu -k "mosaic_forward and halves")
#   hverify: beside mamba-ssm, the default (halves) against two pieces (fwd_walk_warpgroups=1,fwd_walk_pieces=2) at
#            three N 256 shapes
#   hmore: the same at two more N 256 shapes (B4 L4096 H64 G8, B16 L1024 H16)
#   hn128: halves beside the default at five N 128 shapes, no mamba-ssm
#   hg8: B4 L4096 H64 N256 G8 beside mamba-ssm with the profiler's per-kernel times: the default (float32 states kept
#        every 1024 positions, rebuilt in the backward) against every block's state kept (checkpoint_every=0)
#   hkeep: there, beside mamba-ssm, the default against the forward's Mosaic walk per segment of the kept states'
#          1024 positions (two-level, the backward one-level) where the whole walk keeps float32 states (which the
#          Mosaic walk does not: the Triton walk ran); hkeep128: the same at two N 128 shapes that keep them (B8 L2048
#          H80, B8 L4096 H48), no mamba-ssm (hkeep printed nothing: on a fresh machine mamba-ssm's first call took all
#          of its 150 s; hkeep128 was cut at 120 s during B8 L4096 H48's second variant)
#   (then a whole Mosaic walk that keeps float32 states ran per segment of them in the package, not by config)
#   hkept: beside mamba-ssm, the default (that walk per segment) against every block's state kept (checkpoint_every=0)
#          at B4 L4096 H64 N256 G8 and B8 L2048 H80
#   kcheck: the compiled oracle tests of a whole walk keeping float32 states (pytest -m gpu -k "mosaic_forward and kept")
# Thirty-second round (the long shape's state passes now on Mosaic GPU; the N 256 forward's segments):
#   lone: the long shape, no mamba-ssm, with the profiler: the default against the backward's state-gradient pass
#         one-level, every block's state kept, both, and segments of 1024
#   nseg: B2 L8192 H32 N256 G4, no mamba-ssm: the default (segments of 1024) against segments of 512 and 2048
#   (then the default's backward one-level where the Mosaic passes have 0.9 x the SMs' worth of 64-dim heads)
#   lverify: beside mamba-ssm, the long shape: the default against every block's state kept
#   lother: no mamba-ssm, the default against the two-level backward at B8 L16384 H24 and B2 L16384 H64 (192 and 128
#           64-dim heads); at N 256, segments of 2048 at B2 L8192 H32 G4 and B1 L16384 H24
# Thirty-third round (the backward's Mosaic GPU per-head kernel recomputes the pre-gate output; the forward no longer
# stores it):
#   yfirst: no mamba-ssm, with the profiler: the long shape, 130m, 2.7b and B4 L16384 H64 G8; ybase: the same from
#           BASE (a copy of the previous commit's pallas_kernels: BASE=DIR bash tools/gpu-issue15-probe.sh ... ybase)
#   ycheck: the compiled oracle tests of the Mosaic GPU kernels (pytest -m gpu -k "mosaic_kernels or mosaic_forward")
#   yverify: beside mamba-ssm, the long shape; yverify2: beside mamba-ssm, B4 L16384 H64 G8, B4 L4096 H64 N256 G8,
#           2.7b, 130m, B8 L2048 H80 and B2 L8192 H32 N256 G4 (until its limit)
#   (then the benchmark's forward+backward returned the output too: with the gradients alone XLA dropped the forward's
#   walk, whose results the backward no longer kept, so yfirst's forward+backward figures lack it)
#   yfixed: yfirst's first three shapes again; ycheck2: ycheck's tests past where its limit cut it
#   yparity: 130m against the reference and mamba-ssm with the default (every Mosaic GPU kernel)
# Thirty-fourth round (where the GPU sits idle inside a call; forwards the earlier benchmark dropped):
#   igaps: no mamba-ssm, with the profiler's per-kernel times and idle stretches: the long shape, 130m and 2.7b
#   icheck: the compiled walk tests ycheck and ycheck2 did not reach (the unnamed segments-kept case, four pieces,
#           halves)
#   iops: the gated RMSNorm beside mamba-ssm's Triton norm, and the causal conv1d (no mamba-ssm: its CUDA build), with
#         the profiler; then the same from HARNESS (a copy of commit 52fb0f3's compare package, whose forward+backward
#         returned the gradients alone: HARNESS=DIR bash tools/gpu-issue15-probe.sh ... iops)
#   iwall: no mamba-ssm, the long shape timed over samples of 25 ms (two calls, then a sync) and of 300 ms (igaps found
#          the GPU never idle in a trace of five back-to-back calls, whose kernels sum to less than the timed wall)
#   icheck2: the walk test icheck did not reach (n256-halves-kept)
#   (tools/ssd_wall_probe.py then found a fixed start cost of about 0.7 ms a sample at the long shape: 12.23 ms a call
#   timed alone, 11.60 over eight back-to-back calls; the benchmark's default sample went from 25 to 200 ms)
#   isample: beside mamba-ssm, the long shape, samples of 200 ms
#   iparity: yparity again
# Thirty-fifth round (the last same-run figures for issue 15's closing note, samples of 200 ms):
#   zlong: beside mamba-ssm, the long shape, with the profiler; zops: iops's norm and conv rows, samples of 200 ms
#   zbench: beside mamba-ssm, 130m and 2.7b with the profiler, then B4 L16384 H64 G8, B2 L8192 H32 N256 G4 and
#           B4 L4096 H64 N256 G8 (until its limit)
# Thirty-sixth round (sigmoid as rsqrt squared in the four Mosaic GPU kernels that gate by z; ssd_bwd_dx's dD as the
# diagonal of a product):
#   anew: no mamba-ssm, with the profiler: 130m and 2.7b; abase: the same and the long shape from BASE (a copy of the
#         previous commit's pallas_kernels: BASE=DIR bash tools/gpu-issue15-probe.sh ... abase)
#   along: beside mamba-ssm, the long shape, with the profiler
#   acheck: the compiled oracle tests of the Mosaic GPU backward kernels and of the walks with z
#   zncu: ncu on one launch of the backward's per-head kernel (ssd_bwd_dx) at B1 L16384 H128 (the long shape's
#         programs, a quarter of them): warp states, stall reasons, each SASS instruction's stall samples
# Thirty-seventh round (a variant not kept, no faster at the long shape: ssd_bwd_dx with the decay vectors in one
# copy and its outputs in three, C·Bᵀ while dy and X are staged, S_in dSᵀ beside the other products of dS; the dB/dC
# kernel reading the same stacked decay vectors; rerun, the b* runs time the committed kernels against BASE):
#   bnew: no mamba-ssm, with the profiler: the long shape, 130m and 2.7b; bbase: the same from BASE
#   bcheck: the compiled oracle tests of the Mosaic GPU backward kernels (GPU_TEST_WORKERS pytest-xdist processes)
#   bbase2, bnew2: bbase and bnew again at the long shape, BASE first; btests: the compiled oracle tests of the walks
#           and 130m against the reference and mamba-ssm with both Mosaic GPU backward kernels
#   crest: the compiled walk cases acheck did not run and the 130m parity test, on the committed kernels
#   cparity: the 130m parity test with both Mosaic GPU backward kernels again (inputs from TEST_SEED from here on)
#   dchecks: every compiled Mosaic GPU oracle and walk case and the three 130m parity tests (with
#            GPU_TEST_WORKERS=4), then dlong: beside mamba-ssm, the long shape, with the profiler (the checks and the
#            figure that round 37 left for the kernels as committed: round 36's sigmoid, round 35's dD)
#   ebench: beside mamba-ssm, 130m and 2.7b with the profiler (the benchmark shapes' figures for the kernels as
#           committed, last taken in round 35)
#   eparity: the two 130m parity tests besides cparity's (the Triton backward kernels, and the Mosaic GPU dx kernel
#            alone), which dchecks may not have reached before its limit (with GPU_TEST_WORKERS=2)
#   fsweep, fsweep2: beside mamba-ssm, six realistic shapes no round had timed, toward the corners of issue 15's range
#           (L 512 to 131072, 8 to 128 heads, N 64 to 256, groups 1 to 8, chunk 64 to 256); fsweep's two shapes took
#           its whole 560 s
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
bash tools/gpu-parity.sh /tmp/p .sdist unpack > "$OUT/unpack.log" 2>&1 || { tail "$OUT/unpack.log"; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/device.txt"
K="python3 -m compare.kernels --op ssd --reps 10"
# the shapes beyond compare.kernels' named ones (NAME=batch,L,H,P,N,G,chunk); a run passes the definitions of those
# its --shapes names (compare.kernels times every --shape it is given, named or not)
EXTRA_SHAPES=(
    --shape b4-L16384-h64-g8=4,16384,64,64,128,8,256
    --shape b2-L8192-h32-n256-g4=2,8192,32,64,256,4,256
    --shape b4-L4096-h32-n64-g2=4,4096,32,64,64,2,256
    --shape b16-L512-h8=16,512,8,64,128,1,256
    --shape b16-L512-h8-g8=16,512,8,64,128,8,256
    --shape b2-L2048-h32-p128=2,2048,32,128,128,1,256
    --shape b1-L16384-h24=1,16384,24,64,128,1,256
    --shape b1-L131072-h24=1,131072,24,64,128,1,256
    --shape b8-L2048-h24-n256=8,2048,24,64,256,1,256
    --shape b1-L16384-h24-n256=1,16384,24,64,256,1,256
    --shape b4-L4096-h64-n256-g8=4,4096,64,64,256,8,256
    --shape b16-L1024-h16-n256=16,1024,16,64,256,1,256
    --shape b8-L2048-h80=8,2048,80,64,128,1,256
    --shape b8-L4096-h48=8,4096,48,64,128,1,256
    --shape b8-L16384-h24=8,16384,24,64,128,1,256
    --shape b2-L16384-h64=2,16384,64,64,128,1,256
    --shape b1-L131072-h128-g8=1,131072,128,64,128,8,256
    --shape b16-L8192-h8-n64-c64=16,8192,8,64,64,1,64
    --shape b1-L32768-h8-n256-c128=1,32768,8,64,256,1,128
    --shape b8-L4096-h128-n64-g8-c64=8,4096,128,64,64,8,64
    --shape b1-L512-h8-n64-c64=1,512,8,64,64,1,64
    --shape b4-L65536-h16-g2=4,65536,16,64,128,2,256
)
wanted=" $* "
named_extra_shapes() {  # ARGS...: the EXTRA_SHAPES definitions of the shapes that ARGS' --shapes names
    local names=" " listing=0 arg definition
    for arg in "$@"; do
        if [[ $arg == --shapes ]]; then listing=1; elif [[ $arg == --* ]]; then listing=0
        elif ((listing)); then names+="$arg "; fi
    done
    for definition in "${EXTRA_SHAPES[@]}"; do
        [[ $definition != --shape && $names == *" ${definition%%=*} "* ]] && printf -- '--shape\n%s\n' "$definition"
    done
}
run() {
    local name=$1 limit=$2
    shift 2
    [[ $wanted == *" $name "* ]] || return 0
    echo "== $name $(date +%T)"
    local extra
    mapfile -t extra < <(named_extra_shapes "$@")
    timeout "$limit" $K "${extra[@]}" --out "$OUT/$name" "$@" > "$OUT/$name.txt" 2>&1
    local code=$?
    echo "exit $code"
    ((code)) && grep -vE "^\s*$" "$OUT/$name.txt" | tail -4 | cut -c1-300
    grep -E "^\| \S+ \| (forward|forward\+backward) \|" "$OUT/$name.txt" | cut -c1-140
}
gpu_tests() {  # NAME LIMIT K-EXPRESSION: the SSD's GPU tests that match, each test's outcome printed as it ends (-v:
    # a run cut at its limit still names what passed) and again in the summary (-rA)
    [[ $wanted == *" $1 "* ]] || return 0
    echo "== $1 $(date +%T)"
    local workers=()
    [[ -n ${GPU_TEST_WORKERS:-} ]] && python3 -c "import xdist" 2> /dev/null && workers=(-n "$GPU_TEST_WORKERS")
    timeout "$2" python3 -m pytest -p no:cacheprovider -v -m gpu -rA "${workers[@]}" -k "$3" \
        tests/pallas_kernels/test_ssd_pallas_gpu.py > "$OUT/$1.txt" 2>&1
    echo "exit $?"
    grep -E "^(PASSED|FAILED|ERROR) |passed|failed" "$OUT/$1.txt" | tail -12
}
SEG="fused_forward_max_l=0,two_level_states=1,fused_segments=1,state_segment"
ONE=two_level_backward=0
gpu_tests mcheck 300 mosaic_kernels
run mfirst 300 --shapes 130m long --no-torch --pallas-config bwd_dx_mosaic=0
if [[ $wanted == *" mncu "* ]]; then
    echo "== mncu $(date +%T)"
    timeout 300 ncu --clock-control none -k regex:mosaic -c 1 --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
        python3 tools/ssd_step.py --shape 8,2048,24,64,128,1 --steps 1 > "$OUT/mncu.txt" 2>&1
    echo "exit $?"
    grep -E "Registers|Shared Memory|Achieved Occupancy|Theoretical Occupancy|Duration|Block Limit|Stall|Warp Cycles|Issued|DRAM Throughput|Memory Throughput|Compute" "$OUT/mncu.txt" | head -40
fi
run msingle 420 --shapes 130m long b4-L16384-h64-g8 --no-torch \
    --pallas-config bwd_dx_mosaic=0 --profile
run mverify 590 --shapes 130m long b4-L16384-h64-g8 2.7b --torch \
    --pallas-config bwd_dx_mosaic=0
run mother 590 --shapes b2-L8192-h32-n256-g4 b4-L4096-h32-n64-g2 b16-L512-h8 b2-L2048-h32-p128 --no-torch \
    --pallas-config bwd_dx_mosaic=0
gpu_tests mtests 570 "mosaic_kernels or 130m"
run mfinal 200 --shapes 130m long --no-torch --pallas-config bwd_dx_mosaic=0
gpu_tests dtests 570 "mosaic_kernels or 130m and mosaic"
run dfirst 590 --shapes 130m long b4-L16384-h64-g8 b2-L8192-h32-n256-g4 --no-torch --profile \
    --pallas-config bwd_dbc_mosaic=1 --pallas-config bwd_dbc_mosaic=1,bwd_dbc_columns=64
run dquick 250 --shapes 130m long --no-torch --profile --pallas-config bwd_dbc_mosaic=1
run dverify 560 --shapes 130m long 2.7b b4-L16384-h64-g8 b2-L8192-h32-n256-g4 --torch \
    --pallas-config bwd_dbc_mosaic=0 --pallas-config bwd_dbc_columns=64
run dverify2 480 --shapes b4-L16384-h64-g8 b2-L8192-h32-n256-g4 --torch --pallas-config bwd_dbc_mosaic=0 \
    --pallas-config bwd_dbc_columns=64
gpu_tests dparity 450 "130m and mosaic and not dx"
run dother 300 --shapes b16-L512-h8 b16-L512-h8-g8 b4-L4096-h32-n64-g2 b2-L2048-h32-p128 b1-L16384-h24 b1-L131072-h24 \
    --no-torch --pallas-config bwd_dbc_mosaic=0
run mdefault 500 --shapes 130m long 2.7b --torch --pallas-config bwd_dx_mosaic=0
gpu_tests wcheck 200 mosaic_forward
run wfirst 220 --shapes 130m 2.7b long b4-L16384-h64-g8 --no-torch --pallas-config fwd_mosaic=1
run wn256 150 --shapes b2-L8192-h32-n256-g4 b1-L16384-h24 --no-torch --pallas-config fwd_mosaic=1,fused_forward_max_l=8192 \
    --pallas-config fwd_mosaic=1,$SEG=1024,$ONE --pallas-config fwd_mosaic=1,$SEG=512,$ONE
run wverify 380 --shapes 130m 2.7b b2-L8192-h32-n256-g4 --torch --pallas-config fwd_mosaic=0
run wverify2 330 --shapes long b4-L16384-h64-g8 --torch --pallas-config fwd_mosaic=0
run wn256t 170 --shapes b2-L8192-h32-n256-g4 --torch --pallas-config fwd_mosaic=0
run wlong 150 --shapes long b4-L16384-h64-g8 --no-torch --pallas-config fwd_mosaic=0
run wother 200 --shapes b1-L16384-h24 b1-L131072-h24 b16-L512-h8 b16-L512-h8-g8 b4-L4096-h32-n64-g2 b2-L2048-h32-p128 \
    --no-torch --pallas-config fwd_mosaic=0
run wn256b 60 --shapes b8-L2048-h24-n256 --no-torch --pallas-config fwd_mosaic=0,fused_forward_max_l=0
gpu_tests scheck 220 mosaic_forward
run sfirst 330 --shapes 130m long 2.7b b1-L16384-h24 --no-torch --profile --pallas-config states_mosaic=1
run sother 330 --shapes b2-L8192-h32-n256-g4 b4-L16384-h64-g8 b1-L131072-h24 b4-L4096-h32-n64-g2 b2-L2048-h32-p128 \
    b8-L2048-h24-n256 --no-torch --pallas-config states_mosaic=1
run sverify 560 --shapes 130m long 2.7b --torch --pallas-config states_mosaic=0
run sverify2 480 --shapes b2-L8192-h32-n256-g4 b4-L16384-h64-g8 --torch --pallas-config states_mosaic=0
gpu_tests sparity 400 "130m and mosaic and not dx"
run snames 200 --shapes 130m long --no-torch --profile
gpu_tests fcheck 220 mosaic_forward
FSHAPES="130m 2.7b long b2-L8192-h32-n256-g4 b8-L2048-h24-n256"
run fnew 330 --shapes $FSHAPES --no-torch --pallas-config fwd_walk_stages=1
# python -m puts the working directory first on the path: run from $BASE (an absolute path) for its package to win
[[ -n ${BASE:-} ]] && (cd "$BASE" && PYTHONPATH=$BASE:$OLDPWD run fbase 200 --shapes $FSHAPES --no-torch)
run fverify 420 --shapes 130m 2.7b b2-L8192-h32-n256-g4 long --torch
run flong 270 --shapes long --torch
if [[ $wanted == *" fncu "* ]]; then
    echo "== fncu $(date +%T)"
    for case in ${FNCU_CASES:-n256:2,8192,32,64,256,4 130m:8,2048,24,64,128,1 2.7b:4,2048,80,64,128,1}; do
        rep="$OUT/ssd_fwd_walk-${case%%:*}"
        timeout 200 ncu --clock-control none -k regex:ssd_fwd_fused -c 1 -f -o "$rep" --section SpeedOfLight \
            --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
            --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SourceCounters \
            python3 tools/ssd_step.py --shape "${case#*:}" --steps 1 --forward-only > "$rep.log" 2>&1
        echo "${case%%:*} exit $?"
        ncu -i "$rep.ncu-rep" --page details --print-details all > "$rep.txt" 2>&1
        ncu -i "$rep.ncu-rep" --page source --print-source sass --csv > "$rep.csv" 2>&1
        grep -E "Duration|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Tensor|Stall" "$rep.txt" \
            | head -24
    done
fi
run nprof 300 --shapes b2-L8192-h32-n256-g4 b8-L2048-h24-n256 b1-L16384-h24-n256 --no-torch --profile
gpu_tests pcheck 300 mosaic_forward
run pfirst 300 --shapes b2-L8192-h32-n256-g4 b8-L2048-h24-n256 b1-L16384-h24-n256 --no-torch \
    --pallas-config fwd_walk_pieces=2 --pallas-config fwd_walk_pieces=4
run pn128 300 --shapes 130m 2.7b long b4-L16384-h64-g8 --no-torch --pallas-config fwd_walk_pieces=2
run pverify 330 --shapes b2-L8192-h32-n256-g4 b8-L2048-h24-n256 b1-L16384-h24-n256 --torch \
    --pallas-config fwd_walk_pieces=2
gpu_tests pcheck2 200 "mosaic_forward and pieces"
run pdefault 330 --shapes b2-L8192-h32-n256-g4 b8-L2048-h24-n256 b1-L16384-h24-n256 130m --torch
if [[ $wanted == *" pncu "* ]]; then
    echo "== pncu $(date +%T)"
    for case in n256:2,8192,32,64,256,4 n256-pieces:2,8192,32,64,256,4:fwd_walk_pieces=2 \
        b8-n256:8,2048,24,64,256,1 b8-n256-pieces:8,2048,24,64,256,1:fwd_walk_pieces=2; do
        IFS=: read -r name shape config <<< "$case"
        timeout 100 ncu --clock-control none -k regex:ssd_fwd_fused -c 1 --section SpeedOfLight \
            --section MemoryWorkloadAnalysis python3 tools/ssd_step.py --shape "$shape" --steps 1 --forward-only \
            ${config:+--config $config} > "$OUT/pncu-$name.txt" 2>&1
        echo "$name exit $?"
        grep -E "Duration|L2 Cache Throughput|L1/TEX Cache Throughput|DRAM Throughput|Memory Throughput|Mem Busy|Max Bandwidth|L2 Hit" \
            "$OUT/pncu-$name.txt" | head -12
    done
fi
run rfirst 150 --shapes b2-L8192-h32-n256-g4 b8-L2048-h24-n256 b1-L16384-h24-n256 --no-torch \
    --pallas-config fwd_walk_warpgroups=2,fwd_walk_pieces=1
gpu_tests rcheck 170 "mosaic_forward and halves"
run rverify 95 --shapes b2-L8192-h32-n256-g4 --torch --pallas-config fwd_walk_warpgroups=2,fwd_walk_pieces=1
gpu_tests hcheck 180 "mosaic_forward and halves"
gpu_tests kcheck 150 "mosaic_forward and kept"
PIECES=fwd_walk_warpgroups=1,fwd_walk_pieces=2
run hverify 380 --shapes b2-L8192-h32-n256-g4 b8-L2048-h24-n256 b1-L16384-h24-n256 --torch --pallas-config $PIECES
run hmore 250 --shapes b4-L4096-h64-n256-g8 b16-L1024-h16-n256 --torch --pallas-config $PIECES
run hn128 250 --shapes 130m 2.7b long b4-L16384-h64-g8 b1-L16384-h24 --no-torch --pallas-config fwd_walk_warpgroups=2
run hg8 300 --shapes b4-L4096-h64-n256-g8 --torch --profile --pallas-config checkpoint_every=0
KEPT_SEGMENTS=fused_forward_max_l=0,two_level_states=1,fused_segments=1,state_segment=1024,two_level_backward=0
run hkeep 150 --shapes b4-L4096-h64-n256-g8 --torch --pallas-config $KEPT_SEGMENTS
run hkeep128 120 --shapes b8-L2048-h80 b8-L4096-h48 --no-torch --pallas-config $KEPT_SEGMENTS
run hkept 400 --shapes b4-L4096-h64-n256-g8 b8-L2048-h80 --torch --profile --pallas-config checkpoint_every=0
run lone 330 --shapes long --no-torch --profile --pallas-config two_level_backward=0 --pallas-config checkpoint_every=0 \
    --pallas-config two_level_backward=0,checkpoint_every=0 --pallas-config state_segment=1024,checkpoint_every=1024
run nseg 150 --shapes b2-L8192-h32-n256-g4 --no-torch --pallas-config state_segment=512 \
    --pallas-config state_segment=2048
run lverify 360 --shapes long --torch --pallas-config checkpoint_every=0
run lother 90 --shapes b8-L16384-h24 b2-L16384-h64 --no-torch --pallas-config two_level_backward=1
run lseg 80 --shapes b2-L8192-h32-n256-g4 b1-L16384-h24-n256 --no-torch --pallas-config state_segment=2048
YSHAPES="long 130m 2.7b b4-L16384-h64-g8"
run yfirst 170 --shapes $YSHAPES --no-torch --profile
[[ -n ${BASE:-} ]] && (cd "$BASE" && PYTHONPATH=$BASE:$OLDPWD run ybase 170 --shapes $YSHAPES --no-torch --profile)
gpu_tests ycheck 240 "mosaic_kernels or mosaic_forward"
run yverify 330 --shapes long --torch
run yfixed 170 --shapes long 130m 2.7b --no-torch --profile
run yverify2 300 --shapes b4-L16384-h64-g8 b4-L4096-h64-n256-g8 2.7b 130m b8-L2048-h80 b2-L8192-h32-n256-g4 --torch
gpu_tests ycheck2 180 "mosaic_forward and (kept or pieces or halves)"
gpu_tests yparity 400 "130m and mosaic and not dx"
run igaps 200 --shapes long 130m 2.7b --no-torch --profile
op_runs() {  # DIR NAME: the RMSNorm and conv rows of iops with the compare package found first from DIR
    (cd "$1" && PYTHONPATH=$1:$OLDPWD timeout 100 python3 -m compare.kernels --op rmsnorm_gated --reps 20 --torch \
        --profile --out "$OUT/$2-norm" > "$OUT/$2-norm.txt" 2>&1
    PYTHONPATH=$1:$OLDPWD timeout 80 python3 -m compare.kernels --op causal_conv1d --reps 20 --no-torch --profile \
        --out "$OUT/$2-conv" > "$OUT/$2-conv.txt" 2>&1)
    grep -hE "^\| \S+ \| (forward|forward\+backward) \|" "$OUT/$2-norm.txt" "$OUT/$2-conv.txt" | cut -c1-120
}
if [[ $wanted == *" iops "* ]]; then
    echo "== iops $(date +%T)"
    op_runs "$PWD" iops-now
    [[ -n ${HARNESS:-} ]] && op_runs "$HARNESS" iops-base
fi
gpu_tests icheck 230 "mosaic_forward and (config5 or four or halves)"
if [[ $wanted == *" iwall "* ]]; then wanted+=" iwall25 iwall300 "; fi
run iwall25 75 --shapes long --no-torch --sample-ms 25
run iwall300 75 --shapes long --no-torch --sample-ms 300
gpu_tests icheck2 100 "mosaic_forward and halves-kept"
run isample 420 --shapes long --torch --sample-ms 200
gpu_tests iparity 400 "130m and mosaic and not dx"
run zlong 420 --shapes long --torch --profile
[[ $wanted == *" zops "* ]] && echo "== zops $(date +%T)" && op_runs "$PWD" zops
if [[ $wanted == *" zncu "* ]]; then
    echo "== zncu $(date +%T)"
    for case in ${ZNCU_CASES:-h128:1,16384,128,64,128,1:128 130m:8,2048,24,64,128,1:256}; do
        IFS=: read -r name shape chunk <<< "$case"
        rep="$OUT/ssd_bwd_dx-$name"
        timeout 200 ncu --clock-control none -k regex:ssd_bwd_dx -c 1 -f -o "$rep" --section SpeedOfLight \
            --section Occupancy --section WarpStateStats --section SchedulerStats --section SourceCounters \
            python3 tools/ssd_step.py --shape "$shape" --chunk "$chunk" --steps 1 > "$rep.log" 2>&1
        echo "$name exit $?"
        ncu -i "$rep.ncu-rep" --page details --print-details all > "$rep.txt" 2>&1
        ncu -i "$rep.ncu-rep" --page source --print-source sass --csv > "$rep.csv" 2>&1
        grep -E "Duration|Registers Per|Warp Cycles Per Issued|No Eligible|DRAM Throughput|Stall" "$rep.txt" | head -30
    done
fi
run anew 120 --shapes 130m 2.7b --no-torch --profile
[[ -n ${BASE:-} ]] && (cd "$BASE" && PYTHONPATH=$BASE:$OLDPWD run abase 200 --shapes long 130m 2.7b --no-torch --profile)
run along 330 --shapes long --torch --profile
gpu_tests acheck 330 "mosaic_kernels or (mosaic_forward and (config0 or config3 or forward-kept or segments-halves))"
run zbench 560 --shapes 130m 2.7b b4-L16384-h64-g8 b2-L8192-h32-n256-g4 b4-L4096-h64-n256-g8 --torch --profile
BSHAPES="long 130m 2.7b"
run bnew 200 --shapes $BSHAPES --no-torch --profile
[[ -n ${BASE:-} ]] && (cd "$BASE" && PYTHONPATH=$BASE:$OLDPWD run bbase 200 --shapes $BSHAPES --no-torch --profile)
gpu_tests bcheck 250 mosaic_kernels
[[ -n ${BASE:-} ]] && (cd "$BASE" && PYTHONPATH=$BASE:$OLDPWD run bbase2 120 --shapes long --no-torch --profile)
run bnew2 120 --shapes long --no-torch --profile
gpu_tests btests 420 "mosaic_forward or (130m and mosaic and not dx)"
gpu_tests crest 560 \
    "(mosaic_forward and not (config0 or config3 or forward-kept or segments-halves)) or (130m and mosaic and not dx)"
gpu_tests cparity 280 "130m and mosaic and not dx"
gpu_tests dchecks 420 "mosaic_kernels or mosaic_forward or 130m"
run dlong 330 --shapes long --torch --profile
run ebench 470 --shapes 130m 2.7b --torch --profile
gpu_tests eparity 400 "130m and (triton or dx)"
run fsweep 560 --torch --shapes b1-L131072-h128-g8 b16-L8192-h8-n64-c64
run fsweep2 560 --torch --shapes b1-L32768-h8-n256-c128 b8-L4096-h128-n64-g8-c64 b1-L512-h8-n64-c64 b4-L65536-h16-g2
# one file back: this run's files (folders under $OUT are left as they are)
files=$(cd "$OUT" && find . -maxdepth 1 -type f ! -name issue15-probe.tgz)
(cd "$OUT" && tar czf /tmp/issue15-probe.tgz $files && rm -f $files && mv /tmp/issue15-probe.tgz .)
