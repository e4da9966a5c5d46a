#!/usr/bin/env bash
# The checks and measurements of GPU code written without a device, in one call on the next GPU
# machine with 2 or 4 GPUs (nvidia-h100-x4: 64 cores build both revisions in about 3 minutes, then
# the tests and the benchmarks run side by side on separate GPUs). Each item names what it
# settles; drop an item once its code has passed and its numbers are recorded under
# bench/results/.
#   1. test_cuda, whole (GPUs 0-1; TESTS overrides the filter). The whole binary passed on 4 x
#      H200 at 101d334 but for one flip of GpuTensorParallel's gbsa case (since allowed on 2 of
#      48 steps), and the host KV tests (CudaPageCache*, GpuHostKv.*) with the prefetch on by
#      default at c5ea026 on an H100 (bench/results/2026-11-27-s26-host-gather-ctas/).
#   2. (BENCH=mixed) a batch of 8 mixing cs, dense and quest against each alone, 32K
#      (e2e-mixed.json; 2026-11-27 H200 before split_rows: the mix 15.49 ms against dense's 14.97).
#   3. (BENCH=art) ART over dense end to end, natural and forced stops (e2e-art.json).
#   4. ncu's per-kernel breakdown of NCU_POLICY ('|' between several) beside dense at NCU_CONTEXT, NCU_BATCH (ncu.csv;
#      bench/kernel_breakdown.py).
#   6. (BENCH=gemv) the GEMV's two kernels by x rows (bench/gemv_rows.cu), then dense and quest at
#      batch 1, 2, 8 and Retro's w = 2 against the previous revision (at batch 8 the FMA kernel
#      streamed the weights at 2.07 TB/s, 62% of HBM, H100 2026-11-27).
#   5. (PARTS=prefill) prefill attention, every kernel (prefill.json), and ncu's breakdown of the
#      8B shape's 32K prefill (ncu-prefill.csv; bench/kernel_breakdown.py --all).
# Usage (from the repository root, after scripts/device-tree.sh hide, carrying .devdeps and
# build-legacy/tree):
#   mkdir -p build-legacy/tree && git archive REV CMakeLists.txt CMakePresets.json cmake src include \
#     tools bench/cs_recall.cpp bench/attend_scatter.cpp | tar -x -C build-legacy/tree
#   bash scripts/gpu-pending.sh $OUT
# On 4 x H200 (2026-11-27) PARTS=tests,prefill,bench TEST_SHARDS=2 took 245 s with the build
# (the whole test_cuda alone ran past 420 s on 4 x H100; two shards of half the cores each); on
# 4 x H100 PARTS=tests,bench BENCH=gemv BENCH2=mixed TEST_SHARDS=2 took 341 s with both builds.
# The working tree is near the 64 MiB limit: carry the previous revision as build-legacy/tree.tar.xz
# (tar -C build-legacy -cJf build-legacy/tree.tar.xz tree; 0.36 MB).
# Next: a new change: carry the revision
# before it as build-legacy/tree.tar.xz and run PARTS=tests,bench with the benchmark group it
# affects. Nothing on main is untested on a GPU (session 38 ran its MAC changes: bench/results/
# 2026-11-29-s38-h200-mac-merge/); GpuTensorParallel's MAC cases with the rings' two fill views
# need 2 GPUs (nvidia-h200-x2). Pending: branch s38-mac-match-plan (also
# bench/results/2026-11-29-s38-h200-mac-merge/mac-match-plan-and-push-place.patch, `git am` on
# main: MAC's match and plan in one launch over a dense base, and the epilogue reading its push's
# place and query before the PDL wait; compiled, never run) against main as the previous
# revision: TESTS='CudaMac*:GpuEngine.Mac*:GpuHostKv.Retro*:GpuEngine.*Mix*' TEST_TIMEOUT=300
# BENCH=mac, plus the 128K rows (skim bench --e2e-only --no-prefill --8b-only --contexts 131072
# --batches 1 --e2e-policy dense --e2e-policy mac@hits=0 --e2e-policy mac@hits=1000, both
# builds: an earlier fused plan was slower at 128K); keep each commit where it passes and is
# no slower. On one H200 (nvidia-h200, 16 cores; the kinds lent since 2026-11-28) a call with both
# builds, ~40 tests and three attention benches took 364-394 s of wall time (460 s of budget
# with the machine's start); GpuEngine's MAC, Retro and ART cases take ~42 s each there, so give
# TEST_TIMEOUT 300 or more when they run. Session 34 (one H200): both builds, 11-12 ART tests and
# BENCH=attn,compositions took 241-308 s of wall time, about 360 s of budget with the start.
# Session 35 (one H200): both builds, 6-8 Retro/GEMV tests and BENCH=retro or gemv took 150-190 s
# of wall time; PARTS=ncu alone on a warm machine ~45 s (on one GPU ncu now waits for the
# benchmarks: ncu_turn). Session 36 (one H200): both builds, 6-13 tests (GpuEngine.Retro* ~40 s)
# and BENCH=retro took 145-270 s of wall time, 230-330 s of budget with the machine's start. A call returns at most 8 files from OUT: with TEST_SHARDS=2 append to the command
#   ; cp $OUT/logs/test_cuda.log $OUT/; rm -f $OUT/logs/test_cuda.*.log $OUT/logs/*.rc $OUT/logs/tests.done
# so that the concatenated test log comes back whole.
set -uo pipefail
OUT=${1:?usage: gpu-pending.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0
step() { echo; echo "=== $* ($(date +%T))"; }
# The logs live under OUT as they are written: a call cut off by its time limit still returns
# them (2026-11-26: a whole test_cuda past a 500 s call returned nothing from /tmp).
LOGS=$OUT/logs
rm -rf $LOGS && mkdir -p $LOGS

# Clocks, power and throttle reasons every 2 s beside everything below (clocks.csv): machines of
# one kind differ, and one H200 (2026-11-28, session 32) ran under its software power cap so that
# dense attention slowed from 244 to 312 us within one bench and end to end ran 35% slower than on
# another H200 the same hour. Compare within a call, and read this before trusting a ratio.
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 2000 > $LOGS/clocks.csv 2>/dev/null &
clocks_pid=$!
trap 'kill $clocks_pid 2>/dev/null' EXIT

step "build (this revision, then the previous one)"
ENGINE_ONLY=1 BUILD_ONLY=1 bash scripts/gpu-check.sh $LOGS/build > $LOGS/build.log 2>&1 ||
  { tail -30 $LOGS/build.log; exit 1; }
# The previous revision's tree, carried as build-legacy/tree.tar.xz where the tree would not fit
# the 64 MiB the working tree may carry.
[ -f build-legacy/tree.tar.xz ] && [ ! -d build-legacy/tree ] && tar -C build-legacy -xJf build-legacy/tree.tar.xz
if [ -d build-legacy/tree ]; then
  ln -sfn "$(pwd)/models" build-legacy/tree/models
  cmake -S build-legacy/tree -B build-gpu-legacy -G Ninja -DCMAKE_PREFIX_PATH=/tmp/devroot/usr \
    -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DSKIM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DSKIM_BLAS=OFF \
    -DSKIM_ICU=OFF -DSKIM_PNG=OFF -DSKIM_SERVER=OFF -DSKIM_TESTS=OFF -DSKIM_NATIVE=OFF > $LOGS/legacy-cmake.log 2>&1 &&
    cmake --build build-gpu-legacy -j "$(nproc)" --target skim 2>&1 | grep -E "error|FAILED" | head -20
fi
[ -x build-gpu-legacy/skim ] || echo "no previous revision: its comparisons are skipped"

# PARTS=sass: one kernel's per-instruction samples by phase (SASS_KERNEL, SASS_ARGS; sass-phases.md).
# PARTS: which of tests, bench, ncu, prefill run (default the first three; the whole test_cuda takes about 5
# minutes alone, more beside the benchmarks: on a 600 s call run PARTS=tests first, then
# PARTS=bench,ncu on the warm machine, whose build-gpu*/ stay).
PARTS=${PARTS:-tests,bench,ncu}
has() { [[ ",$PARTS," == *",$1,"* ]]; }
case "$(nvidia-smi -L | wc -l)" in
  [4-9]) G_TESTS=0,1 G_BENCH=2 G_NCU=3 ;;
  [23]) G_TESTS=0 G_BENCH=1 G_NCU=0 ;;
  *) G_TESTS=0 G_BENCH=0 G_NCU=0 ;;  # one GPU: the benchmarks wait for the tests (timings alone)
esac
step "$PARTS: tests on GPUs $G_TESTS, benchmarks on GPU $G_BENCH, ncu on GPU $G_NCU"
TESTS=${TESTS:-'*'}
# TEST_SHARDS=N: test_cuda as N gtest shards side by side, shard i on GPUs i and i+1 (mod the
# count: the tensor-parallel tests take two); the whole binary alone ran past 420 s on 4 x H100
# (2026-11-27). Each shard gets its share of the cores (OMP_NUM_THREADS): the CPU engines the
# tests compare against use OpenMP, and 4 shards on all 64 cores each ran 7x slower than one
# binary alone (2026-11-27). Its logs are concatenated into test_cuda.log, its rc the largest.
SHARDS=${TEST_SHARDS:-1}
NGPU=$(nvidia-smi -L | wc -l)
( if has tests; then
    for ((i = 0; i < SHARDS; ++i)); do
      gpus=$G_TESTS
      [ "$SHARDS" -gt 1 ] && gpus="$((i % NGPU)),$(((i + 1) % NGPU))"
      ( OMP_NUM_THREADS=$(( $(nproc) / SHARDS )) CUDA_VISIBLE_DEVICES=$gpus GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$i timeout ${TEST_TIMEOUT:-400} \
          build-gpu/tests/test_cuda --gtest_filter="$TESTS" > $LOGS/test_cuda.$i.log 2>&1
        echo $? > $LOGS/test_cuda.$i.rc ) &
    done
    wait
    cat $LOGS/test_cuda.*.log > $LOGS/test_cuda.log
    sort -n $LOGS/test_cuda.*.rc | tail -1 > $LOGS/test_cuda.rc
  fi
  touch $LOGS/tests.done ) &
tests_pid=$!
# The ncu GPU's turn: after the tests where they share it (2 GPUs, or one), and on one GPU after
# the benchmarks too, which time kernels beside it otherwise (session 35's call 6: dense b1 ran
# 27% slower beside ncu).
ncu_turn() {
  [ "$G_NCU" = 0 ] && while [ ! -e $LOGS/tests.done ]; do sleep 2; done
  [ "$G_NCU" = "$G_BENCH" ] && while [ ! -e $LOGS/bench.done ]; do sleep 2; done
  return 0
}
( if has ncu; then
    ncu_turn
    IFS='|' read -ra ncu_policies <<< "${NCU_POLICY:-cs:keep=0.05,list=0.05,points=4096}"  # '|' between policies
    # NCU_ARGS: skim bench's arguments instead (e.g. the --retro steps' breakdown).
    if [ -n "${NCU_ARGS:-}" ]; then read -ra bench_args <<< "$NCU_ARGS"; else
      bench_args=(--e2e-only --no-prefill --8b-only --no-dense-fallback --sparse-keep 0.1 --contexts ${NCU_CONTEXT:-32768}
        --batches ${NCU_BATCH:-1} --steps 1 --e2e-policy dense "${ncu_policies[@]}"); fi
    CUDA_VISIBLE_DEVICES=$G_NCU timeout 240 ncu --csv --metrics gpu__time_duration.sum --cache-control none \
      --clock-control none build-gpu/skim bench "${bench_args[@]}" > $LOGS/ncu.csv 2> $LOGS/ncu.err
    echo "ncu rc $?" >> $LOGS/ncu.err
  fi
  if has sass; then
    # One kernel's warp-state samples by instruction, cut into phases at its barriers
    # (bench/sass_phases.py): SASS_KERNEL (an ncu regex) in the launch SASS_SKIP of skim bench
    # SASS_ARGS (default gbsa's select in gbsa+art's step, b8 32K; session 34 ran it through this
    # script with SASS_KERNEL=art_split_kernel: call2-sass-art-split-kernel.md in
    # bench/results/2026-11-29-s34-h200-art-loop/). On one GPU it runs after the benchmarks.
    ncu_turn
    read -ra sass_args <<< "${SASS_ARGS:---e2e-only --no-prefill --8b-only --no-dense-fallback --contexts 32768 --batches 8 --steps 2 --e2e-policy gbsa:keep=0.1,n_min=16+art:stop=group,test=probe}"
    CUDA_VISIBLE_DEVICES=$G_NCU timeout 200 ncu --kernel-name "regex:${SASS_KERNEL:-select_kernel}" \
      --launch-skip ${SASS_SKIP:-64} --launch-count 1 --set full --import-source yes -f -o /tmp/sass \
      build-gpu/skim bench "${sass_args[@]}" > $LOGS/sass-ncu.log 2>&1
    ncu -i /tmp/sass.ncu-rep --page source --csv --print-source sass > $LOGS/sass.csv 2>> $LOGS/sass-ncu.log
    ncu -i /tmp/sass.ncu-rep --page details > $LOGS/sass-details.txt 2>> $LOGS/sass-ncu.log
    python3 bench/sass_phases.py $LOGS/sass.csv > $OUT/sass-phases.md 2>> $LOGS/sass-ncu.log
  fi
  if has prefill; then
    ncu_turn
    CUDA_VISIBLE_DEVICES=$G_NCU timeout 200 build-gpu/skim bench --attention-only --attention-contexts 32768 \
      --attention-batches 1 --sparse-keep 0 --prefill-attention 8192,32768,131072 --json "$OUT/prefill.json" |
      grep -E "^\| [0-9]" > $LOGS/prefill.log 2>&1
    CUDA_VISIBLE_DEVICES=$G_NCU timeout 300 ncu --csv --metrics gpu__time_duration.sum --cache-control none \
      --clock-control none build-gpu/skim bench --e2e-only --8b-only --e2e-policy none --prefill-contexts 32768 \
      --prefill-8b-max 32768 > $LOGS/ncu-prefill.csv 2>> $LOGS/ncu.err
    echo "ncu (prefill) rc $?" >> $LOGS/ncu.err
  fi ) &
ncu_pid=$!
# BENCH: which benchmark groups `bench` runs (default all): cs (cs at 5% beside dense and quest,
# b1), mixed (one batch of 8 mixing policies beside each alone), hostkv (512K over host KV), art
# (ART over dense, natural and forced stops, e2e), gemv (the decode GEMV's two kernels, e2e by batch),
# mac (MAC at forced hit rates against dense, both revisions), csfallback (cs with the engine's
# dense fallback, b1 32K and 128K), select (quest, gbsa and cs at b1 and b8, both revisions),
# attn (every policy's attention step at b1 and b8, 32K and 128K, against its floor; issue 16's
# table), artlag (ART's natural stops at b1 by lag and round), hostkvslots (quest 5% at 512K over host KV
# by device cache size), hostkvauto (every selector and MAC, ART, Retro at 512K over host KV, auto slots),
# hostkvprefetch (quest and gbsa at 5%, 512K over host KV, with and without --host-kv-prefetch),
# hostgather (the host-to-device gather's bandwidth by kernel form, against the copy engines),
# retro (Retro w = 2, 4, 8 against quest at b1 and b8 32K, both revisions), macart (MAC over quest
# with and without ART, forced hits, 32K), artround (ART's verdict cost by round size, both revisions),
# selectbw (quest's and gbsa's selection kernels alone by variant, bench/select_bw.cu and
# group_select_bw.cu, both revisions), artbw (ART's kernel
# alone against dense, forced stops, bench/art_bw.cu; also under the previous revision's tree),
# compositions (quest, gbsa and streaming with and without ART end to end, b1 and b8 32K, both revisions),
# e2e (dense, quest, gbsa and gbsa+art end to end, b1 and b8 32K, this revision, the previous, this again).
BENCH=${BENCH:-cs,mixed,hostkv,art,gemv}
# BENCH2: groups run at the same time on the ncu GPU (4 GPUs and PARTS without ncu), into decode2.log.
bench_groups() {  # GROUPS GPU
  local groups=$1
  bench_has() { [[ ",$groups," == *",$1,"* ]]; }
  [ "$2" = "$G_TESTS" ] && while [ ! -e $LOGS/tests.done ]; do sleep 2; done
  export CUDA_VISIBLE_DEVICES=$2
    # Lists of 5% and 4096 k-means points keep cs's tables near 1 GB at 32K (list=0.2 would hold
    # 2.6 GB a sequence at 32K, 10 GB at 128K).
    cs='cs:keep=0.05,list=0.05,points=4096'
    quest='quest:budget=0.05,min=0,dense_layers=0'
    if bench_has cs; then  # cs on the GPU: beside dense and quest at 5%, 8B shape, b1
      timeout 300 build-gpu/skim bench --e2e-only --no-prefill --8b-only --steps 16 --no-dense-fallback --e2e-policy dense "$cs" "$cs,step=4" \
        "$quest" --contexts 32768,131072 --batches 1 --json "$OUT/e2e-cs.json" | grep -E "8B|rror"
    fi
    if bench_has select; then
      # The selection's radix select stopping early (page_select_common.cuh): quest, gbsa and cs
      # at b1 and b8 32K, this revision against the previous one, interleaved.
      for bin in build-gpu build-gpu-legacy build-gpu; do
        [ -x $bin/skim ] || continue
        echo "-- select, $bin"
        timeout 200 $bin/skim bench --e2e-only --no-prefill --8b-only --steps 16 --no-dense-fallback --e2e-policy dense \
          'quest:budget=0.1,min=0,dense_layers=0' 'gbsa:keep=0.1,n_min=16' "$cs" --contexts 32768 --batches 1,8 | grep -E "8B|rror"
      done
    fi
    if bench_has csfallback; then  # cs with the engine's dense fallback (issue 20): dense's time at b1 32K
      echo "-- cs, dense fallback"
      timeout 200 build-gpu/skim bench --e2e-only --no-prefill --8b-only --steps 16 --e2e-policy dense "$cs" \
        "$cs,step=4" --contexts 32768,131072 --batches 1 | grep -E "8B|rror"
    fi
    if bench_has mixed; then
      # One batch of 8 mixing policies (issue 16) beside each policy's batch of 8 alone: the page
      # kernel's split planned for the rows' lists (PagedDecodeArgs::split_rows, 2026-11-27).
      echo "-- mixed"
      mixed=(--e2e-only --no-prefill --8b-only --steps 16 --no-dense-fallback --e2e-policy dense "$cs" "$quest" "$cs;dense;$quest" \
        "dense;$quest" "dense;$quest;$quest;$quest" --contexts 32768 --batches 8)
      timeout 300 build-gpu/skim bench "${mixed[@]}" --json "$OUT/e2e-mixed.json" | grep -E "8B|rror"
      if [ -x build-gpu-legacy/skim ]; then  # the previous revision, same GPU, right after
        echo "-- mixed, previous revision"
        timeout 300 build-gpu-legacy/skim bench "${mixed[@]}" | grep -E "8B|rror"
      fi
    fi
    if bench_has hostkv; then
      # cs over KV beyond GPU memory at 512K, batch 1 (issue 18), beside gbsa at 2%: random keys
      # scatter cs's picks over the pages (a worst case: 0.5% of the keys touch ~2.5K pages a head).
      echo "-- host KV"
      timeout 200 build-gpu/skim bench --e2e-only --no-prefill --8b-only --steps 16 --sparse-keep 0.02 \
        --e2e-policy 'gbsa:keep=0.02,n_min=16' 'cs:keep=0.005,list=2048,points=4096' --contexts 524288 --batches 1 \
        --host-kv-slots 8192 | grep -E "8B|rror"
    fi
    if bench_has art; then
      # ART over dense end to end (issue 16's rule: faster than dense by at least 60% of the
      # fraction it skips), its natural stops on random K/V and stops forced after round 2.
      echo "-- art"
      timeout 300 build-gpu/skim bench --e2e-only --no-prefill --8b-only --steps 16 --art --sparse-keep 0 \
        --contexts 32768,131072 --batches 1,8 --json "$OUT/e2e-art.json" | grep -E "8B|rror"
      # Batch 1 with fewer warps a list (art:warps): a smaller wave overshoots an early stop less
      # (at the decode split's 128 warps a list, stops forced after round 2 read 47% of 32K and ran
      # slower than dense, H100 2026-11-27).
      forced='art:order=group,stop=group,test=probe,round=16,patience=2,eps_scale=1000,eps_dir=2'
      timeout 200 build-gpu/skim bench --e2e-only --no-prefill --8b-only --steps 16 --e2e-policy dense "$forced" \
        "$forced,warps=32" "$forced,warps=16" --contexts 32768,131072 --batches 1 | grep -E "8B|rror"
    fi
    if bench_has attn; then
      # Issue 16's attention-step table: each policy's selection + attention + merge at b1 and b8,
      # 32K and 128K, against its bytes floor, dense in the same run (gbsa, quest with random and
      # agreeing heads, cs's tokens, ART's forced stops, and where nothing stops quest+art, gbsa+art,
      # streaming and streaming+art).
      # Then the previous revision's binary, where it was built, for the same tables.
      for bin in build-gpu build-gpu-legacy; do
        [ -x $bin/skim ] || continue
        echo "-- attention steps, $bin"
        json=(); [ $bin = build-gpu ] && json=(--json "$OUT/attention-steps.json")
        timeout 300 $bin/skim bench --attention-only --sparse-keep 0.1 --art --attention-contexts 32768,131072 \
          --attention-batches 1,8 "${json[@]}" | grep -vE "^$"
      done
    fi
    if bench_has compositions; then
      # Issue 16's compositions with ART where nothing stops (random K/V), end to end beside their
      # bases, this revision against the previous one (H100 2026-11-28 at b8 32K, session 31: quest
      # 10.88 -> quest+art 11.98 ms, gbsa 8.47 -> 9.11, streaming 10% 7.33 -> 7.60; the
      # attention-step row is --attention-only --art's quest+art table).
      Q='quest:budget=0.1,min=0,dense_layers=0'; G='gbsa:keep=0.1,n_min=16'; S='streaming:sink=4,window=3273'
      A='art:stop=group,test=probe'
      for bin in build-gpu build-gpu-legacy; do
        [ -x $bin/skim ] || continue
        echo "-- compositions, $bin"
        timeout 250 $bin/skim bench --e2e-only --no-prefill --8b-only --steps 16 --no-dense-fallback --e2e-policy \
          "$Q" "$Q+$A" "$G" "$G+$A" "$S" "$S+$A" --contexts 32768 --batches 1,8 | grep -E "8B|rror"
      done
    fi
    if bench_has e2e; then
      # Dense and the sparse bases end to end, b1 and b8 32K, this revision against the previous
      # one interleaved (new, old, new): a change to the shared kernels (the GEMVs, the selections)
      # shows in dense's row or only in the selections'.
      Q='quest:budget=0.1,min=0,dense_layers=0'; G='gbsa:keep=0.1,n_min=16'; A='art:stop=group,test=probe'
      for bin in build-gpu build-gpu-legacy build-gpu; do
        [ -x $bin/skim ] || continue
        echo "-- e2e, $bin"
        timeout 250 $bin/skim bench --e2e-only --no-prefill --8b-only --steps 16 --no-dense-fallback --e2e-policy \
          dense "$Q" "$G" "$G+$A" --contexts 32768 --batches 1,8 | grep -E "8B|rror"
      done
    fi
    if bench_has artlag; then
      # Is ART's cost at b1 its verdicts' latency? On random K/V it never stops, yet costs about
      # 200 us a layer over dense at 32K, 730 at 128K (H100 2026-11-27): in proportion to its
      # rounds. If the gates wait on verdicts, a longer lag (more rounds of slack) or longer
      # rounds (fewer verdicts) should take most of it away; if not, the cost is elsewhere (the
      # per-block probe states and fences).
      echo "-- art lag and round, b1"
      natural='art:order=group,stop=group,test=probe'
      timeout 200 build-gpu/skim bench --e2e-only --no-prefill --8b-only --steps 16 --e2e-policy dense \
        "$natural,round=16" "$natural,round=16,lag=20" "$natural,round=16,lag=40" "$natural,round=32" \
        "$natural,round=32,lag=20" --contexts 32768,131072 --batches 1 | grep -E "8B|rror"
    fi
    if bench_has hostkvslots; then
      # quest 5% over host KV at 512K ran at 8.4 tokens/s with 8192 slots (53.5% hits, 5.2 GB a
      # step over PCIe; issue 18 asks 10): the device cache holds 16 GB of the H100's 80 there, and
      # the bytes copied fall with every slot more.
      echo "-- host KV, larger device caches"
      for slots in 8192 16384 24576; do
        timeout 200 build-gpu/skim bench --e2e-only --no-prefill --8b-only --steps 16 \
          --e2e-policy 'quest:budget=0.05,min=0,dense_layers=0' --contexts 524288 --batches 1 \
          --host-kv-slots $slots | grep -E "8B|rror"
      done
    fi
    if bench_has hostkvauto; then
      # Issue 18's 512K target (10 tokens/s at batch 1) with `--host-kv-slots auto` (the cache as
      # large as the GPU holds: 24576 slots took quest 5% from 8.4 to 24.9 tokens/s on an H200,
      # 2026-11-27), every page selector at 2% and 5%, and the stages that map lists of their own
      # over host KV since 2026-11-27: MAC over quest (forced 90% hits), ART over gbsa, Retro w=2.
      echo "-- host KV, auto slots, 512K"
      timeout 420 build-gpu/skim bench --e2e-only --no-prefill --8b-only --steps 16 --e2e-policy \
        'quest:budget=0.05,min=0,dense_layers=0' 'quest:budget=0.02,min=0,dense_layers=0' 'gbsa:keep=0.05,n_min=16' \
        'gbsa:keep=0.02,n_min=16' 'quest:budget=0.05,min=0,dense_layers=0+mac:min_context=0@hits=900' \
        'gbsa:keep=0.05,n_min=16+art:stop=group,test=probe' --contexts 524288 --batches 1 --host-kv-slots auto \
        --json "$OUT/e2e-hostkv-auto.json" | grep -E "8B|rror"
      timeout 200 build-gpu/skim bench --e2e-only --no-prefill --8b-only --steps 16 --e2e-policy none --retro --retro-windows 2 \
        --sparse-keep 0.05 --contexts 524288 --batches 1 --host-kv-slots auto | grep -E "^\| random|rror"
    fi
    if bench_has hostgather; then
      # The PCIe ceiling of a step's misses (bench/host_gather_bw.cu): the copy engines' rate
      # against skim's gather kernel by CTAs, 8 loads in flight a thread, and cp.async.bulk
      # (the gather ran at about 28 GB/s under ncu at 512K, H100 2026-11-27).
      echo "-- host gather bandwidth"
      # Where the pinned pool sits may matter (reads from a NUMA node away from the GPU cross the
      # sockets' link):
      # the topology first, then the bench on each memory node numactl offers.
      nvidia-smi topo -m 2>/dev/null | head -6; lscpu | grep -i numa
      nvcc -O3 -arch=sm_90a -std=c++20 -Isrc -Iinclude bench/host_gather_bw.cu -o /tmp/host_gather_bw &&
        timeout 120 /tmp/host_gather_bw 16
      if command -v numactl > /dev/null && [ "$(lscpu | awk '/^NUMA node\(s\)/ {print $3}')" -gt 1 ] 2>/dev/null; then
        for node in $(seq 0 $(( $(lscpu | awk '/^NUMA node\(s\)/ {print $3}') - 1 ))); do
          echo "-- memory on NUMA node $node"
          timeout 120 numactl --membind=$node /tmp/host_gather_bw 16 | grep -E "dma|gather .* 128 "
        done
      fi
    fi
    if bench_has hostkvprefetch; then
      # KV beyond GPU memory copied ahead (--host-kv-prefetch, the default since 2026-11-27, issue
      # 18's overlap) against without, 512K b1 auto slots: quest 5% 43.25 / 32.17 ms, gbsa 5%
      # 36.19 / 28.15 without / with (one H100, 2026-11-27, the prefetch's gathers at 4 CTAs a KV head).
      # PREFETCH_POINTS: context:slots pairs (default 512K with auto slots; at 128K with 4096 slots
      # the branches at 128 CTAs made quest 5% 19.3 -> 22.8 ms and gbsa 14.6 -> 15.3, H100).
      for point in ${PREFETCH_POINTS:-524288:auto}; do
        for p in 'quest:budget=0.05,min=0,dense_layers=0' 'gbsa:keep=0.05,n_min=16'; do
          for pf in --no-host-kv-prefetch ""; do
            echo "-- host KV prefetch: ${point%%:*} tokens, ${point##*:} slots, $p $pf"
            timeout 100 build-gpu/skim bench --e2e-only --no-prefill --8b-only --steps 16 --e2e-policy "$p" \
              --contexts ${point%%:*} --batches 1 --host-kv-slots ${point##*:} $pf | grep -E "8B|rror"
          done
        done
      done
    fi
    if bench_has retro; then
      # RetroAttention over quest 0.1 (issue 17: w = 2 within 10% of quest; on an H200 1.11x at
      # b1 32K and 1.07-1.08x at b8 after session 36), this revision against the previous one.
      for bin in build-gpu build-gpu-legacy build-gpu; do
        [ -x $bin/skim ] || continue
        echo "-- retro, $bin"
        timeout 200 $bin/skim bench --e2e-only --no-prefill --8b-only --steps 16 --e2e-policy none --retro \
          --sparse-keep 0.1 --retro-windows 2,4,8 --contexts 32768 --batches 1,8 | grep -E "8B|rror"
      done
    fi
    if bench_has mac; then
      # MAC over dense at forced hit rates against dense (issue 17: a miss may cost no more than
      # dense + the match), this revision against the previous one.
      for bin in build-gpu build-gpu-legacy build-gpu; do
        [ -x $bin/skim ] || continue
        echo "-- mac, $bin"
        timeout 200 $bin/skim bench --e2e-only --no-prefill --8b-only --steps 16 --mac --sparse-keep 0 \
          --contexts 32768 --batches 1,8 | grep -E "8B|rror"
      done
    fi
    if bench_has macart; then
      # mac+art end to end (issue 17, the GPU since 2026-11-27): MAC over quest 10% at forced 50%
      # hits, with ART over both lists (art:stop=group) and without, 32K b1 and b8.
      echo "-- mac+art"
      macq='quest:budget=0.1,min=0,dense_layers=0+mac:min_context=0'
      timeout 200 build-gpu/skim bench --e2e-only --no-prefill --8b-only --steps 16 --e2e-policy dense \
        'quest:budget=0.1,min=0,dense_layers=0' 'quest:budget=0.1,min=0,dense_layers=0+art:stop=group,test=probe' \
        "$macq@hits=500" "$macq+art:stop=group,test=probe@hits=500" \
        "$macq@hits=900" "$macq+art:stop=group,test=probe@hits=900" --contexts 32768 --batches 1,8 | grep -E "8B|rror"
    fi
    if bench_has artround; then
      # ART's verdict cost by round size (blocks of 64 tokens a test), over quest 0.1 and over
      # dense, 32K b1 and b8, this revision against the previous one: on random K/V nothing stops,
      # so this is what the verdicts cost (H100 2026-11-27 before merge_heads: dense+art at rounds
      # of one block 84.2 ms a token at b1 against dense's 7.2, 11.9 at rounds of 32).
      Q='quest:budget=0.1,min=0,dense_layers=0'; A='art:stop=group,test=probe'; D='art:order=group,stop=group,test=probe'
      for bin in build-gpu build-gpu-legacy build-gpu; do
        [ -x $bin/skim ] || continue
        echo "-- art rounds, $bin"
        timeout 250 $bin/skim bench --e2e-only --no-prefill --8b-only --steps 16 --no-dense-fallback --e2e-policy dense "$Q" \
          "$Q+$A" "$Q+$A,round=4" "$Q+$A,round=8" "$Q+$A,round=32" "$D" "$D,round=4" "$D,round=8" "$D,round=32" \
          --contexts 32768 --batches 1,8 | grep -E "8B|rror"
      done
    fi
    if bench_has artbw; then
      # ART's kernel alone, stops forced at rounds 1-8 and never, against dense (2026-11-28, b8 32K
      # stop 2, time over dense's rate for its bytes: H100 1.41x; H200 1.89x before the verdict
      # warp, 1.55x after).
      echo "-- art kernel alone"
      nvcc -O3 -arch=sm_90a -std=c++20 -Isrc -Iinclude bench/art_bw.cu -o /tmp/art_bw && /tmp/art_bw
      if [ -d build-legacy/tree/src ]; then
        echo "-- art kernel alone, previous revision"
        mkdir -p build-legacy/tree/bench && cp bench/art_bw.cu build-legacy/tree/bench/ &&
          nvcc -O3 -arch=sm_90a -std=c++20 -Ibuild-legacy/tree/src -Ibuild-legacy/tree/include \
            build-legacy/tree/bench/art_bw.cu -o /tmp/art_bw_legacy && /tmp/art_bw_legacy
      fi
    fi
    if bench_has selectbw; then
      # quest's score, select and union kernels alone against the digests' read ceiling (H100
      # 2026-11-27: score + select + union 123 us at b8 128K, the score 100 of it).
      # Then gbsa's (bench/group_select_bw.cu); both benches also over the previous revision's
      # tree where it is carried, interleaved (this, previous, this).
      trees=(src); [ -d build-legacy/tree/src ] && trees+=(build-legacy/tree/src src)
      for i in "${!trees[@]}"; do
        inc="-I${trees[$i]} -I${trees[$i]%src}include"
        echo "-- select kernels, ${trees[$i]}"
        for b in select_bw group_select_bw; do
          nvcc -O3 -arch=sm_90a -std=c++20 $inc bench/$b.cu -o /tmp/$b.$i && /tmp/$b.$i
        done
      done
    fi
    if bench_has gemv; then
      # The decode GEMV by x rows, FMA against tensor-core kernel (bench/gemv_rows.cu), then end to
      # end at batch 1, 2 and 8 and RetroAttention's w = 2 (two rows a sequence), this revision
      # against the previous one, interleaved.
      echo "-- gemv"
      nvcc -O3 -arch=sm_90a -std=c++20 -Isrc bench/gemv_rows.cu -o /tmp/gemv_rows && /tmp/gemv_rows
      for bin in build-gpu build-gpu-legacy build-gpu; do
        [ -x $bin/skim ] || continue
        echo "-- $bin"
        timeout 200 $bin/skim bench --e2e-only --no-prefill --8b-only --steps 16 --e2e-policy dense "$quest" \
          --contexts 32768 --batches 1,2,4,8 | grep -E "8B|rror"
        timeout 200 $bin/skim bench --e2e-only --no-prefill --8b-only --steps 16 --e2e-policy none --retro \
          --sparse-keep 0.1 --retro-windows 2 --contexts 32768 --batches 1,2 | grep -E "8B|rror"
      done
    fi
}
( ( has bench && bench_groups "$BENCH" $G_BENCH ) > $LOGS/decode.log 2>&1; touch $LOGS/bench.done ) &
decode_pid=$!
( has bench && [ -n "${BENCH2:-}" ] && bench_groups "$BENCH2" $G_NCU ) > $LOGS/decode2.log 2>&1 &
decode2_pid=$!

wait $decode_pid $decode2_pid $tests_pid $ncu_pid
rc=$(cat $LOGS/test_cuda.rc 2>/dev/null || echo "not run")
echo "test_cuda rc $rc (124: timed out)"
grep -vE '^\[ +(RUN|OK) +\]' $LOGS/test_cuda.log | grep -E "FAILED|PASSED|\[ (mac|retro|sparse|golden|greedy)" | head -40
if [ "$rc" != 0 ] && [ "$rc" != "not run" ]; then
  status=1
  grep -B2 -A8 -E "Failure|exception" $LOGS/test_cuda.log | head -80
fi
cat $LOGS/decode.log $LOGS/decode2.log; tail -3 $LOGS/ncu.err 2>/dev/null; [ -s $LOGS/ncu.csv ] && python3 bench/kernel_breakdown.py $LOGS/ncu.csv | tail -25
[ -s $LOGS/prefill.log ] && cat $LOGS/prefill.log
[ -s $LOGS/ncu-prefill.csv ] && python3 bench/kernel_breakdown.py --all $LOGS/ncu-prefill.csv | head -30
kill $clocks_pid 2>/dev/null
# Throttle reasons seen (0x4: the software power cap) and the lowest SM clock under load.
awk -F', ' 'NR > 1 && $3 + 0 > 1000 {n++; if (!min || $3 + 0 < min) min = $3 + 0; r[$7]++}
  END {printf "clocks: %d samples under load, lowest SM clock %d MHz; reasons:", n, min; for (k in r) printf " %s x%d", k, r[k]; print ""}' $LOGS/clocks.csv
rm -rf "$LOGS/build"  # the build's own outputs: not needed back
echo "gpu-pending status $status"
exit $status
