#!/usr/bin/env bash
# On a GPU machine: builds the CUDA decode attention (plain nvcc, sm_90a, no project
# dependencies), runs its parity test against the CPU reference, benchmarks it against the
# copy bandwidth and PyTorch SDPA, and writes into OUT_DIR:
#   gpu-check.log  environment, build, register/SASS summary, everything printed
#   parity.log     one line per parity case
#   bench.json     skim kernel timings (default + variants)   sdpa.json   PyTorch timings
#   results.json   joined results                             results.md  the table
#   engine steps   (in gpu-check.log) the engine build, test_cuda (kernel parity, the demo
#                  model on the GPU against the golden fixtures), `skim bench` -> bench-e2e.json
#   summary.md     skim bench against SDPA (both timed in CUDA graphs), issue 5's targets
# With more than 8 files in OUT_DIR (the device tool returns 8 at most), all but gpu-check.log and
# summary.md end in gpu-check.tar.gz.
# Usage: bash scripts/gpu-check.sh OUT_DIR   (env: NCU=1 adds an Nsight Compute profile of
# one point (NCU_BATCH, NCU_CTX); QUICK=1 runs fewer cases and points; SKIP_SDPA=1;
# ENGINE_ONLY=1 runs the engine steps alone, SKIP_ENGINE=1 the kernel steps alone; MATRIX=1 adds
# the end-to-end policy matrix of issue 16 -> bench-matrix-*.json; SKIP_SERVE=1 skips the server
# checks; GTEST_FILTER selects test_cuda's tests; BENCH_ARGS go to `skim bench`; BUILD_ONLY=1 with
# ENGINE_ONLY=1 builds build-gpu/ and stops)
#
# The engine build needs the Debian -dev packages a GPU machine may lack: put their .deb files
# in .devdeps/ (scripts/gpu-deps.sh fetches them) and they are unpacked under /tmp/devroot;
# the large optional ones (OpenBLAS, ICU, libpng) are left out with -DSKIM_BLAS/ICU/PNG=OFF.
# The engine steps also build the previous revision's engine when build-legacy/tree holds its
# sources, and time `skim bench` of both builds interleaved (new, old, new, old) in the same
# run -> bench-e2e.json, bench-e2e-2.json, bench-legacy.json, bench-legacy-2.json and
# compare.md (bench/bench_compare.py: best of each build's runs, per point):
#   mkdir -p build-legacy/tree && git archive REV CMakeLists.txt CMakePresets.json cmake src include \
#     tools bench/cs_recall.cpp bench/attend_scatter.cpp | tar -x -C build-legacy/tree
# The benchmark also times the previous library kernel when build-legacy/legacy_impl.cuh
# exists (make it here, carry it to the GPU machine, which has no git history):
#   mkdir -p build-legacy && git show REV:src/backend/cuda/paged_decode_attention_impl.cuh |
#     sed -e 's/namespace skim::cuda::detail/namespace skim::cuda::legacy/' -e 's/^#pragma once//' \
#     > build-legacy/legacy_impl.cuh
set -uo pipefail
OUT=${1:?usage: gpu-check.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
B=build-gpu-check
mkdir -p "$B"
LOG=$OUT/gpu-check.log
exec > >(tee -a "$LOG") 2>&1
status=0
step() { echo; echo "=== $* ($(date +%T))"; }
# The device tool sends back at most 8 files of $OUT: with more, everything but the log and the
# summary goes into one gpu-check.tar.gz (unpack it here with tar -xzf).
bundle_out() {
  [ "$(find "$OUT" -type f | wc -l)" -le 8 ] && return
  (cd "$OUT" && find . -type f ! -name gpu-check.log ! -name summary.md ! -name gpu-check.tar.gz -print0 |
    tar -czf gpu-check.tar.gz --null -T - --remove-files) && echo "gpu-check: the rest of $OUT is in gpu-check.tar.gz"
}

step environment
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
nvcc --version | tail -2
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' || true

engine_steps() {
  step "engine build"
  local root=/tmp/devroot
  if [ -d .devdeps ]; then
    mkdir -p $root
    for f in .devdeps/*.deb; do dpkg -x "$f" $root; done
  fi
  export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # The HTTP server links cpp-httplib, which needs OpenSSL 3 and Brotli at run time: built
  # only where .devdeps has it and the machine has those.
  local server=OFF
  if ls .devdeps/libcpp-httplib0* >/dev/null 2>&1 && ldconfig -p | grep -q 'libssl.so.3 ' &&
     ldconfig -p | grep -q 'libbrotlidec.so.1 '; then server=ON; fi
  echo "HTTP server: $server"
  # NCCL (tensor parallelism): the CUDA toolkit's, else PyTorch's nvidia-nccl wheel.
  if [ ! -e /usr/local/cuda/include/nccl.h ] && [ -z "${NCCL_HOME:-}" ]; then
    NCCL_HOME=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
    [ -n "$NCCL_HOME" ] && export NCCL_HOME && export LD_LIBRARY_PATH=$NCCL_HOME/lib:$LD_LIBRARY_PATH
  fi
  echo "NCCL: ${NCCL_HOME:-/usr/local/cuda}"
  export NCCL_NVLS_ENABLE=0
  cmake -S . -B build-gpu -G Ninja -DCMAKE_PREFIX_PATH=$root/usr -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON \
    -DSKIM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DSKIM_BLAS=OFF -DSKIM_ICU=OFF -DSKIM_PNG=OFF -DSKIM_SERVER=$server \
    -DSKIM_NATIVE=OFF > $OUT/engine-cmake.log 2>&1 || { tail -30 $OUT/engine-cmake.log; return 1; }
  cmake --build build-gpu -j "$(nproc)" --target skim test_cuda 2>&1 | grep -E "error|FAILED|warning: .*cuda" | head -40
  [ -x build-gpu/skim ] && [ -x build-gpu/tests/test_cuda ] || { echo "ENGINE BUILD FAILED"; return 1; }
  [ "${BUILD_ONLY:-0}" = 1 ] && return 0
  step "test_cuda"
  # The whole suite takes about 5 minutes (the CPU policies it compares with run at 4K).
  timeout 540 build-gpu/tests/test_cuda > $OUT/test_cuda.log 2>&1
  local rc=$?
  grep -vE '^\[ +(RUN|OK) +\]' $OUT/test_cuda.log | tail -60
  if [ $rc != 0 ]; then  # the failures' details, which the tail may have cut
    echo "TEST_CUDA FAILED (rc $rc; 124: the timeout)"
    grep -B2 -A6 -E "Failure|exception" $OUT/test_cuda.log | head -80
    status=1
  fi
  if [ -d build-legacy/tree ]; then
    step "legacy engine build"
    ln -sfn "$(pwd)/models" build-legacy/tree/models
    cmake -S build-legacy/tree -B build-gpu-legacy -G Ninja -DCMAKE_PREFIX_PATH=$root/usr \
      -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DSKIM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DSKIM_BLAS=OFF \
      -DSKIM_ICU=OFF -DSKIM_PNG=OFF -DSKIM_SERVER=OFF -DSKIM_TESTS=OFF -DSKIM_NATIVE=OFF > $OUT/legacy-cmake.log 2>&1 &&
      cmake --build build-gpu-legacy -j "$(nproc)" --target skim 2>&1 | grep -E "error|FAILED" | head -20
    [ -x build-gpu-legacy/skim ] || echo "LEGACY BUILD FAILED: the comparison is skipped"
  fi
  step "skim generate --device cuda"
  timeout 120 build-gpu/skim generate --device cuda -p "def fibonacci(n):" -n 64 || { echo "GENERATE FAILED"; status=1; }
  timeout 120 build-gpu/skim generate --device cuda -f models/demo-code-28m/README.md -n 256 --ignore-eos --json |
    python3 -c 'import json,sys; j=json.loads(sys.stdin.readlines()[-1]); j.pop("text"); j.pop("tokens"); print(j)'
  [ "$server" = ON ] && [ "${SKIP_SERVE:-0}" != 1 ] && serve_steps
  step "skim bench"
  timeout 300 build-gpu/skim bench ${BENCH_ARGS:-} --json $OUT/bench-e2e.json || { echo "SKIM BENCH FAILED"; status=1; }
  if [ "${MATRIX:-0}" = 1 ]; then
    # Issue 16's matrix: every GPU policy at --sparse-keep (0.1) and at its defaults, the
    # mixed batch, 8B shape, batch 1 and 8 at 32K, batch 1 at 128K (8 x 128K of KV, 137 GB,
    # does not fit an 80 GB card).
    step "skim bench: policy matrix"
    timeout 400 build-gpu/skim bench --e2e-only --no-prefill --policy-defaults --art --mac --retro --batches 1,8 --contexts 32768 \
      --json $OUT/bench-matrix-32k.json || { echo "MATRIX BENCH FAILED"; status=1; }
    timeout 300 build-gpu/skim bench --e2e-only --no-prefill --policy-defaults --art --mac --batches 1 --contexts 131072 \
      --json $OUT/bench-matrix-128k.json || { echo "MATRIX BENCH FAILED"; status=1; }
  fi
  if [ -x build-gpu-legacy/skim ]; then
    step "skim bench: previous revision, then both again"
    timeout 300 build-gpu-legacy/skim bench ${BENCH_ARGS:-} --json $OUT/bench-legacy.json > /dev/null || echo "LEGACY BENCH FAILED"
    timeout 300 build-gpu/skim bench ${BENCH_ARGS:-} --json $OUT/bench-e2e-2.json > /dev/null || echo "SKIM BENCH FAILED"
    timeout 300 build-gpu-legacy/skim bench ${BENCH_ARGS:-} --json $OUT/bench-legacy-2.json > /dev/null || echo "LEGACY BENCH FAILED"
    python3 bench/bench_compare.py $OUT/bench-e2e.json,$OUT/bench-e2e-2.json \
      $OUT/bench-legacy.json,$OUT/bench-legacy-2.json --md $OUT/compare.md
  fi
}

# skim serve on the GPU: a greedy completion equals `skim generate --device cuda`, then the
# load test of bench/serve_bench.py at several concurrencies -> serve-bench.json.
serve_steps() {
  step "skim serve --device cuda"
  local port=18080 url=http://127.0.0.1:18080
  # --no-dense-fallback: at these 3.5K-token prompts the engine's default would run the policy
  # mix below densely (it cannot pay there), and the mix is here to time the policies' steps.
  build-gpu/skim serve --device cuda --port $port --parallel 8 --ctx 4096 --prefix-cache 2 --no-dense-fallback \
    > $OUT/serve.log 2>&1 &
  local spid=$!
  for _ in $(seq 120); do curl -sf $url/health > /dev/null 2>&1 && break; sleep 0.5; done
  python3 - "$url" <<'PY' || { echo "SERVE CHECK FAILED"; status=1; }
import json, subprocess, sys, urllib.request
url = sys.argv[1]
prompt = "def fibonacci(n):"
req = urllib.request.Request(url + "/v1/completions", headers={"Content-Type": "application/json"},
    data=json.dumps({"prompt": prompt, "max_tokens": 64, "temperature": 0, "ignore_eos": True}).encode())
served = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["text"]
out = subprocess.run(["build-gpu/skim", "generate", "--device", "cuda", "-p", prompt, "-n", "64",
                      "--ignore-eos", "--json"], capture_output=True, text=True, check=True).stdout
alone = json.loads(out.strip().splitlines()[-1])["text"]
print("served == generate:", served == alone)
# The prefix cache: a long prompt twice; the second request resumes from the first's pages
# (copied on the device) and must produce the same text as generate.
doc = open("models/demo-code-28m/README.md").read()
texts = []
for _ in range(2):
    req = urllib.request.Request(url + "/v1/completions", headers={"Content-Type": "application/json"},
        data=json.dumps({"prompt": doc, "max_tokens": 32, "temperature": 0, "ignore_eos": True}).encode())
    texts.append(json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["text"])
out = subprocess.run(["build-gpu/skim", "generate", "--device", "cuda", "-f", "models/demo-code-28m/README.md",
                      "-n", "32", "--ignore-eos", "--json"], capture_output=True, text=True, check=True).stdout
ref = json.loads(out.strip().splitlines()[-1])["text"]
hits = [l for l in urllib.request.urlopen(url + "/metrics").read().decode().splitlines()
        if l.startswith("skim_prefix_cache_hits_total")]
print("prefix cache:", hits, "first == generate:", texts[0] == ref, "second (a hit) == generate:", texts[1] == ref)
# Log-probabilities, computed on the device: one per generated token, greedy's the most likely.
req = urllib.request.Request(url + "/v1/completions", headers={"Content-Type": "application/json"},
    data=json.dumps({"prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True,
                     "logprobs": 3}).encode())
lp = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["logprobs"]
lp_ok = len(lp["token_logprobs"]) == 16 and all(len(t) == 3 for t in lp["top_logprobs"]) and all(
    abs(max(t.values()) - v) < 1e-6 for t, v in zip(lp["top_logprobs"], lp["token_logprobs"]))
print("logprobs on the GPU:", lp_ok, lp["token_logprobs"][:4])
ok = served == alone and texts[0] == ref and texts[1] == ref and hits and float(hits[0].split()[-1]) >= 1 and lp_ok
sys.exit(0 if ok else 1)
PY
  python3 bench/serve_bench.py --url $url --concurrency 1,4,8 --requests 2 --prompt-tokens 1024 \
    --max-tokens 128 --json $OUT/serve-bench.json || { echo "SERVE BENCH FAILED"; status=1; }
  # A mixed-policy load against an all-dense one of the same shape (long prompts, where the
  # policies read less): the GPU decodes the mix in one batch.
  local i=0
  for mix in "dense" "dense;quest:budget=0.1,min=0;gbsa:keep=0.1,n_min=16;resa:keep=0.1,n_min=16"; do
    i=$((i + 1))
    python3 bench/serve_bench.py --url $url --concurrency 8 --requests 2 --prompt-tokens 3584 --max-tokens 128 \
      --policy-mix "$mix" --json $OUT/serve-bench-mix$i.json ||
      { echo "SERVE BENCH (policy mix $mix) FAILED"; status=1; }
  done
  curl -s $url/metrics | grep -v '^#'
  kill -TERM $spid; wait $spid
  tail -3 $OUT/serve.log
}

if [ "${ENGINE_ONLY:-0}" = 1 ]; then
  engine_steps || status=1
  echo "gpu-check status $status"
  exit $status
fi

step build
ARCH="-gencode=arch=compute_90a,code=sm_90a"
FLAGS="-std=c++20 -O3 -Isrc -lineinfo"
set -e
pids=()
nvcc $FLAGS $ARCH -Xptxas -v -c src/backend/cuda/paged_decode_attention.cu -o $B/pda.o 2> $B/ptxas.txt & pids+=($!)
# The CPU reference (bf16) and the CPU kernel (fp32) it shares a file with, over the CPU
# attention core (attend, split_attend: OpenMP).
for f in paged_decode_attention attend split_attend; do
  nvcc $FLAGS -Xcompiler -fopenmp -c src/backend/cpu/$f.cpp -o $B/cpu_$f.o & pids+=($!)
done
nvcc $FLAGS -Itests/cuda -c tests/cuda/paged_decode_parity_main.cc -o $B/parity_main.o & pids+=($!)
LEGACY=""
[ -f build-legacy/legacy_impl.cuh ] && LEGACY="-DSKIM_BENCH_LEGACY=\"$(pwd)/build-legacy/legacy_impl.cuh\"" && echo "benchmark includes the legacy kernel"
nvcc $FLAGS $ARCH $LEGACY -c bench/attention/decode_attention_bench.cu -o $B/bench.o & pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
nvcc $ARCH -Xcompiler -fopenmp $B/parity_main.o $B/pda.o $B/cpu_paged_decode_attention.o $B/cpu_attend.o \
  $B/cpu_split_attend.o -o $B/parity
nvcc $ARCH $B/bench.o -o $B/bench  # bench.o compiles the library source in itself
set +e
grep -E "Compiling entry|registers|spill" $B/ptxas.txt | sed 's/ptxas info    : //' | paste - - -
if command -v cuobjdump >/dev/null; then
  echo "SASS of the default D=128 split kernel (instruction counts):"
  cuobjdump -sass -fun '_ZN4skim4cuda6detail12split_kernelILi128ELi8ELi2ELb0EEEvNS1_11SplitParamsE' $B/pda.o |
    grep -oE '\b(LDGSTS|HMMA|LDSM|MUFU|SHFL|BAR|LDG|STG|LDS|STS|LDL|STL)\b[.A-Z0-9_]*' | sort | uniq -c
fi

step parity
quick=${QUICK:+--quick}
$B/parity $quick 2>&1 | tee "$OUT/parity.log"
[ "${PIPESTATUS[0]}" = 0 ] || { echo "PARITY FAILED"; status=1; }

step benchmark
$B/bench --variants ${QUICK:+--quick} --out "$OUT/bench.json" || { echo "BENCH FAILED"; status=1; }

step sdpa
[ "${SKIP_SDPA:-0}" = 1 ] && echo skipped || PYTHONUNBUFFERED=1 python3 bench/attention/sdpa_bench.py ${QUICK:+--quick} --out "$OUT/sdpa.json" || { echo "SDPA FAILED"; status=1; }

if [ "${NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
  step "ncu (batch ${NCU_BATCH:-1}, ctx ${NCU_CTX:-32768})"
  timeout 240 ncu --clock-control none --kernel-name regex:split_kernel --launch-skip 30 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
    $B/bench --point ${NCU_BATCH:-1} ${NCU_CTX:-32768} --out /tmp/ncu_bench.json | grep -vE '^\s*$' | tail -120
fi

[ "${SKIP_ENGINE:-0}" = 1 ] || engine_steps || status=1

step report
python3 bench/attention/report.py "$OUT/bench.json" "$OUT/sdpa.json" "$OUT/results.json" "$OUT/results.md" \
  --parity "$OUT/parity.log" >/dev/null || status=1
[ -s "$OUT/bench-e2e.json" ] && python3 bench/gpu_report.py "$OUT/bench-e2e.json" "$OUT/sdpa.json" "$OUT/summary.md" > /dev/null
echo
cat "$OUT/results.md"
[ -s "$OUT/summary.md" ] && cat "$OUT/summary.md"
grep '^parity:' "$OUT/parity.log"
echo "gpu-check status $status"
bundle_out
exit $status
