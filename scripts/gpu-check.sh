#!/usr/bin/env bash
# The one script for the GPU machine (issue 6): CUDA op parity and timings, the CUDA runner against
# the CPU runner and the golden file, the peer check against HF transformers on random Qwen3-0.6B /
# Qwen3-8B checkpoints, and the benchmark (tandem's Engine beside HF beside the roofline).
#
#   scripts/gpu-check.sh pack   on the dev machine (nvcc, no GPU): builds cuda_op_check,
#                               cuda_runner_check, cuda_peer_dump and cuda_engine_bench with the
#                               project's CMake (sm_90, OpenBLAS static) into build-cuda/ and packs
#                               them (stripped, xz) with the shared libraries the device lacks, the
#                               headers for a fallback build and the golden files into
#                               .device-carry/ (ignored through .git/info/exclude).
#   scripts/gpu-check.sh build-device   only the kernels-only fallback build, into build-kernels/.
#   scripts/gpu-check.sh        on the device machine (run tool, carry [".device-carry"]): the
#                               stages of GPU_CHECK_STAGES in order, then the summary (last).
#
# Stages (GPU_CHECK_STAGES, comma separated; default ops,runner,golden,peer,bench,hf):
#   archs     the SASS and PTX each carried binary holds: tests/tools/fatbin_archs.py beside
#             cuobjdump --list-elf / --list-ptx
#   ops       cuda_op_check: every CUDA op against its CPU reference, timed (GPU_CHECK_ARGS passes
#             arguments, e.g. "--only decode"); built on the device from dev/kernels/CMakeLists.txt
#             when the carried binary is missing or cannot load
#             GPU_CHECK_OPS_BASE=DIR (a pack of an earlier build): its cuda_op_check with the same
#             arguments after this build's, then this build's again; the timed rows side by side
#   sanitize  compute-sanitizer memcheck (small shapes) and racecheck (small prefill); also run when
#             GPU_CHECK_SANITIZE=1
#   ncu       Nsight Compute (clock control off) on the tensor-core decode kernels, both loads, at
#             each shape of GPU_CHECK_NCU_SHAPES (default 64x4096,1x4096: batch x context, Qwen3-8B
#             heads), untimed op_check rows (OPCHECK_DECODE_TIMED, OPCHECK_NO_TIMING);
#             GPU_CHECK_NCU_KV_FP8=1: also its FP8-KV instance (OPCHECK_KV_FP8_TIMED)
#   runner    cuda_runner_check: the CUDA ModelRunner against the CPU runner on the bundled tiny model
#   fp8       cuda_runner_check with FP8 projections: the tiny model with --quantization fp8 (both
#             runners quantize per channel at load), then its FP8 block checkpoint made by
#             tests/tools/make_fp8_checkpoint.py; GPU_CHECK_FP8_RUNNER_ARGS adds arguments (--tol)
#   kv-fp8    cuda_runner_check with an FP8 E4M3 KV cache on both runners (--kv-cache-dtype fp8: the
#             CUDA decode kernel over the codes, prefill over their bf16 copy), logits within 15%
#             and the same argmax but near-ties (--tol 0.15, as the fp8 stage: the CPU rounds fp32
#             K/V to e4m3, CUDA bf16 K/V, so a code is a step (1/16 to 1/8) off where the two
#             straddle a rounding tie, and six random layers grow it: 8.7% worst on the H200,
#             4.5% on the CPU emulator, against 2% with bf16 KV);
#             GPU_CHECK_KV_FP8_RUNNER_ARGS adds arguments (--quantization fp8); then the same on
#             the bundled model with calibrated k_scale / v_scale per layer (runner-kv-scales)
#   golden    scripts/gpu/golden_check.py: the tiny model's greedy ids through the CUDA runner
#             against tests/golden/tiny-qwen3{,-long}.json (carried in .device-carry/golden)
#   peer-fp8-0.6b, peer-fp8-8b  scripts/gpu/peer_check_fp8.py: the random checkpoint quantized by
#             transformers' FineGrainedFP8Config, tandem's CUDA runner on it beside HF's FP8 and bf16
#   peer      peer-0.6b and peer-8b: scripts/gpu/peer_check.py (random checkpoint made with
#             transformers, HF bf16 logits and greedy tokens vs cuda_peer_dump)
#   bench     cuda_engine_bench on the random Qwen3-8B checkpoint (made if the peer stage did not
#             leave one): decode tok/s at batch 1/8/64/256 with 1k context, prefill 512/2k/8k;
#             GPU_CHECK_BENCH_ARGS adds arguments; GPU_CHECK_GRAPHS_COMPARE=1 runs it again with
#             TANDEM_CUDA_GRAPHS=0 (a second column)
#   ncu-prefill  Nsight Compute (clock control off) on the Hopper prefill kernel, one fresh prompt of
#             GPU_CHECK_NCU_PREFILL_TOKENS (default 4096) tokens, untimed op_check rows
#   variants  cuda_op_check once per environment in GPU_CHECK_VARIANTS ("A=1 B=2;A=3"), with
#             GPU_CHECK_VARIANT_ARGS (default --only prefill)
#   ncu-step  Nsight Compute over a few decode steps of cuda_engine_bench (batch
#             GPU_CHECK_NCU_STEP_BATCH, default 1): each kernel's time alone, per step
#             (scripts/gpu/ncu_step_table.py; compare the sum with the bench's graph step)
#   ncu-kernel  Nsight Compute sections on chosen kernels of cuda_engine_bench (GPU_CHECK_NCU_KERNEL,
#             a regex, default Fp8Gemv; _SKIP, _COUNT, _ARGS: see the stage), report in ncu-kernel.txt
#   hf        scripts/gpu/hf_bench.py: HF transformers on the same shapes (GPU_CHECK_HF_ARGS adds
#             arguments, e.g. "--batches 1,8")
# The benchmark table (bench_table.py) prints when bench or hf ran.
# Env: GPU_CHECK_DEADLINE (seconds for the whole call, default 570: a stage that would start too late
# is skipped, each is cut at what is left, so the summary always prints); GPU_CHECK_BUILD_TEST=1 also
# tries the fallback build; GPU_CHECK_KEEP=1 keeps the checkpoints (in /dev/shm when it has room,
# else /tmp; removed at the end otherwise).
# Files in $OUT (at most 8 come back): gpu-check.log (every stage's output as it runs),
# op_check.log, summary.txt, results.tar.gz (the JSON results), memcheck.log, racecheck.log,
# device-build.log. Never touches clocks, power or modes.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# GPU_CHECK_CARRY: the pack's folder (default .device-carry); GPU_CHECK_BUILD: the build folder
# `pack` uses (default build-cuda); GPU_CHECK_ARCHS: TANDEM_CUDA_ARCHS for that build (default:
# CMake's, every supported GPU), e.g. 80-virtual for a build whose CUDA code is compute_80 PTX only.
CARRY=$ROOT/${GPU_CHECK_CARRY:-.device-carry}
BUILD=${GPU_CHECK_BUILD:-build-cuda}
BINS="cuda_op_check cuda_runner_check cuda_peer_dump cuda_engine_bench"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1

pack() {
  set -e
  local ignore="/$(basename "$CARRY")/"
  grep -qxF "$ignore" .git/info/exclude 2>/dev/null || echo "$ignore" >> .git/info/exclude
  local archs=()
  [ -n "${GPU_CHECK_ARCHS:-}" ] && archs=("-DTANDEM_CUDA_ARCHS=$GPU_CHECK_ARCHS")
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_CUDA=ON "${archs[@]}" > /dev/null
  # shellcheck disable=SC2086
  nice -n 10 cmake --build "$BUILD" -j2 --target $BINS
  # Only this script's files: .device-carry/e2e (scripts/gpu-e2e.sh) stays.
  mkdir -p "$CARRY"
  rm -rf "$CARRY/lib" "$CARRY/include" "$CARRY/golden" "$CARRY/BUILD_INFO"
  for b in $BINS; do rm -f "$CARRY/$b.xz"; done
  mkdir -p "$CARRY/lib" "$CARRY/include" "$CARRY/golden"
  for b in $BINS; do
    strip -o "$CARRY/$b" "$BUILD/$b"
    xz -T2 -6 "$CARRY/$b"
  done
  # Every shared library but the C/C++ runtime and the CUDA driver / cuBLAS (the device has its
  # own, found by find_cublas): fmt, spdlog, pcre2, utf8proc, xxhash, cudart ...
  # shellcheck disable=SC2086
  for lib in $(cd "$BUILD" && ldd $BINS | awk '/=>/ {print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|libpthread.so.*|libdl.so.*|librt.so.*) ;;
      libcuda.so.*|libcublas*.so.*|libnvidia*) ;;
      *) cp -L "$lib" "$CARRY/lib/" ;;
    esac
  done
  cp -r /usr/include/fmt "$CARRY/include/"
  cblas=$(dirname "$(find /usr/include -name cblas.h | head -1)")
  cp "$cblas"/cblas.h "$cblas"/openblas_config.h "$CARRY/include/" 2>/dev/null || true
  local golden=$ROOT/tests/golden
  cp "$golden"/tiny-qwen3.json "$golden"/tiny-qwen3-long.json "$CARRY/golden/"
  { echo "built $(date -u +%FT%TZ) on $(uname -n) from $(git rev-parse --short HEAD) in $BUILD," \
      "TANDEM_CUDA_ARCHS=$(sed -n 's/^TANDEM_CUDA_ARCHS:STRING=//p' "$BUILD/CMakeCache.txt")"
    git status --short -- src dev/kernels | head -20; } > "$CARRY/BUILD_INFO"
  du -sh "$CARRY"; ls -la "$CARRY" "$CARRY/lib"
}

# Adds directories that hold libcublas.so.13 (CUDA toolkit, or PyTorch's pip wheels) to the path.
find_cublas() {
  local dirs="/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib"
  dirs="$dirs $(python3 -c 'import nvidia, os; p = list(nvidia.__path__)[0]; print(" ".join(os.path.join(r) for r, _, f in os.walk(p) if "libcublas.so.13" in f))' 2>/dev/null)"
  for d in $dirs; do
    [ -e "$d/libcublas.so.13" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
  done
  export LD_LIBRARY_PATH
}

build_on_device() {
  echo "== building cuda_op_check on this machine (dev/kernels/CMakeLists.txt, kernels only)"
  cmake -S dev/kernels -B build-kernels -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DTANDEM_EXTRA_INCLUDE="$CARRY/include" \
        -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" \
    && cmake --build build-kernels -j"$(nproc)" --target cuda_op_check
}

# The kernels-only fallback build on the device, timed, log to $1/device-build.log.
build_test() {
  local t0=$SECONDS
  if timeout 150 "$ROOT/scripts/gpu-check.sh" build-device > "$1/device-build.log" 2>&1; then
    echo "== kernels-only build on this machine: ok ($((SECONDS - t0)) s)"
  else
    echo "== kernels-only build on this machine FAILED ($((SECONDS - t0)) s):"; tail -15 "$1/device-build.log"
    return 1
  fi
}

BIN=/tmp/gpu-check/$(basename "$CARRY")
# Unpacks a carried binary into $BIN; 0 when it starts (prints its usage or runs with no GPU), else 1.
unpack() {
  local name=$1
  [ -e "$CARRY/$name.xz" ] || { echo "no $CARRY/$name.xz (run scripts/gpu-check.sh pack)"; return 1; }
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    "$CARRY/$name.xz" "$BIN/$name" && chmod +x "$BIN/$name"
  local missing
  missing=$(ldd "$BIN/$name" 2>&1 | grep "not found")
  if [ -n "$missing" ]; then
    echo "$name cannot start here: $missing"
    return 1
  fi
}

# Stage bookkeeping: STATUS lines for the summary, the deadline.
STATUS=()
FAILED=()  # stages whose command failed: their log tails go into the summary
T_START=$SECONDS
DEADLINE=${GPU_CHECK_DEADLINE:-570}
left() { echo $((DEADLINE - (SECONDS - T_START))); }
want() { [[ ",$STAGES," == *",$1,"* ]]; }
note() { STATUS+=("$(printf '%-10s %s' "$1" "$2")"); echo "== $(date -u +%T) stage $1: $2"; }

# run_stage NAME MAX_SECONDS MIN_SECONDS CMD...: runs CMD under timeout min(MAX, time left - 20),
# its output appended to $OUT/gpu-check.log and kept in $RES/NAME.log; skipped when less than
# MIN_SECONDS are left. Sets RC.
run_stage() {
  local name=$1 max=$2 min=$3
  shift 3
  local budget
  budget=$(( $(left) - 20 ))
  if [ "$budget" -lt "$min" ]; then
    RC=skipped
    note "$name" "SKIPPED (${budget} s left before the deadline, needs ~${min} s)"
    return
  fi
  [ "$budget" -gt "$max" ] && budget=$max
  echo "== $(date -u +%T) stage $name (timeout $budget s): $*"
  { echo; echo "==== stage $name: $* (timeout $budget s)"; } >> "$OUT_DIR/gpu-check.log"
  local t0=$SECONDS
  timeout "$budget" "$@" 2>&1 | tee "$RES/$name.log" >> "$OUT_DIR/gpu-check.log"
  RC=${PIPESTATUS[0]}
  local msg="exit $RC in $((SECONDS - t0)) s"
  [ "$RC" = 124 ] && msg="TIMED OUT after $budget s"
  [ "$RC" != 0 ] && FAILED+=("$name")
  echo "==== stage $name: $msg" >> "$OUT_DIR/gpu-check.log"
  note "$name" "$msg"
}

device() {
  OUT_DIR=${OUT:-/tmp/gpu-check-out}
  RES=$BIN/results
  rm -rf "$RES"
  mkdir -p "$OUT_DIR" "$BIN" "$RES"
  local s list=()
  IFS=, read -ra list <<< "${GPU_CHECK_STAGES:-ops,runner,golden,peer,bench,hf}"
  STAGES=""
  for s in "${list[@]}"; do
    [ "$s" = peer ] && s=peer-0.6b,peer-8b
    STAGES="$STAGES${STAGES:+,}$s"
  done
  [ "${GPU_CHECK_SANITIZE:-0}" = 1 ] && ! want sanitize && STAGES="$STAGES,sanitize"
  {
    echo "== $(date -u +%FT%TZ) gpu-check on $(uname -n), stages $STAGES, deadline $DEADLINE s"
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,clocks.max.sm,power.draw,power.limit,temperature.gpu \
      --format=csv 2>&1
    cat "$CARRY/BUILD_INFO" 2>/dev/null
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1
    df -h /tmp /dev/shm 2>&1 | tail -2
  } | tee "$OUT_DIR/gpu-check.log"
  export LD_LIBRARY_PATH="$CARRY/lib:${LD_LIBRARY_PATH:-}"
  find_cublas
  peer_dir=/tmp/tandem-peer
  if [ "$(df --output=avail -B1 /dev/shm 2>/dev/null | tail -1)" -gt 48000000000 ] 2>/dev/null; then
    peer_dir=/dev/shm/tandem-peer
  fi
  [ "${GPU_CHECK_KEEP:-0}" = 1 ] || trap 'rm -rf "$peer_dir"' EXIT
  local ckpt8=$peer_dir/qwen3-8b models=$BIN/models op_rc=skipped

  if want ops; then
    local opbin=""
    # (its usage exits 2: `|| true` so that pipefail does not take that for a failure)
    if unpack cuda_op_check && { "$BIN/cuda_op_check" --probe 2>&1 || true; } | grep -q "^usage:"; then
      opbin=$BIN/cuda_op_check
    elif build_test "$OUT_DIR"; then
      opbin=$ROOT/build-kernels/cuda_op_check
    fi
    if [ -n "$opbin" ]; then
      echo "== $(date -u +%T) stage ops: $opbin ${GPU_CHECK_ARGS:-}"
      # shellcheck disable=SC2086
      timeout 300 "$opbin" ${GPU_CHECK_ARGS:-} > "$OUT_DIR/op_check.log" 2>&1
      op_rc=$?
      grep -v "^ok " "$OUT_DIR/op_check.log" | sed '/==== cuda_op_check summary/,$d' | tail -30
      note ops "exit $op_rc (0 pass, 1 parity failure, 2 CUDA error)$([ "$op_rc" = 124 ] && echo ' TIMED OUT')"
    else
      op_rc=2
      note ops "no cuda_op_check to run"
    fi
    [ "${GPU_CHECK_BUILD_TEST:-0}" = 1 ] && [ "$opbin" = "$BIN/cuda_op_check" ] && build_test "$OUT_DIR"
    # GPU_CHECK_OPS_BASE=DIR: a pack of an earlier build (DIR/cuda_op_check.xz) run with the same
    # arguments right after, then this build again; rows compared by scripts/gpu/op_check_compare.py.
    local obase=${GPU_CHECK_OPS_BASE:-}
    if [ -n "$opbin" ] && [ -n "$obase" ] && [ -e "$ROOT/$obase/cuda_op_check.xz" ]; then
      mkdir -p "$BIN/base"
      CARRY=$ROOT/$obase BIN=$BIN/base unpack cuda_op_check
      echo "== $(date -u +%T) stage ops-base: $obase ${GPU_CHECK_ARGS:-}"
      # shellcheck disable=SC2086
      timeout 300 "$BIN/base/cuda_op_check" ${GPU_CHECK_ARGS:-} > "$OUT_DIR/op_check-base.log" 2>&1
      note ops-base "exit $?"
      # shellcheck disable=SC2086
      timeout 300 "$opbin" ${GPU_CHECK_ARGS:-} > "$OUT_DIR/op_check-2.log" 2>&1
      note ops-2 "exit $?"
    fi
  fi
  want sanitize && [ ! -x "$BIN/cuda_op_check" ] && unpack cuda_op_check
  if want sanitize && command -v compute-sanitizer > /dev/null && [ -x "$BIN/cuda_op_check" ]; then
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$BIN/cuda_op_check" --small --seed 1 \
      > "$OUT_DIR/memcheck.log" 2>&1
    local mem_rc=$?
    timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 "$BIN/cuda_op_check" --small --only prefill \
      > "$OUT_DIR/racecheck.log" 2>&1
    local race_rc=$?
    note sanitize "memcheck rc $mem_rc ($(grep -m1 'ERROR SUMMARY' "$OUT_DIR/memcheck.log")), racecheck prefill rc $race_rc ($(grep -m1 'RACECHECK SUMMARY\|ERROR SUMMARY' "$OUT_DIR/racecheck.log"))"
  fi

  if want ncu; then
    [ -x "$BIN/cuda_op_check" ] || unpack cuda_op_check
    local shape
    for shape in $(echo "${GPU_CHECK_NCU_SHAPES:-64x4096,1x4096}" | tr , ' '); do
      run_stage "ncu-$shape" 150 30 env OPCHECK_DECODE_TIMED="$shape" OPCHECK_NO_TIMING=1 \
        ncu --clock-control none --kernel-name regex:PagedDecodeMmaKernel --launch-count 4 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section WarpStateStats --section SchedulerStats --section LaunchStats \
        "$BIN/cuda_op_check" --only decode
      if [ "${GPU_CHECK_NCU_KV_FP8:-0}" = 1 ]; then  # the FP8-KV instance of the kernel, same shape
        run_stage "ncu-kv-fp8-$shape" 150 30 env OPCHECK_KV_FP8_TIMED="$shape" OPCHECK_NO_TIMING=1 \
          ncu --clock-control none --kernel-name regex:PagedDecodeMmaKernel --launch-count 1 \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
          --section WarpStateStats --section SchedulerStats --section LaunchStats --section SourceCounters \
          "$BIN/cuda_op_check" --only kv_fp8
      fi
    done
  fi

  if want ncu-prefill; then
    # The Hopper prefill kernel on one fresh prompt (GPU_CHECK_NCU_PREFILL_TOKENS, default 4096),
    # untimed: where its warps stall and how busy the tensor pipe and L2 are.
    [ -x "$BIN/cuda_op_check" ] || unpack cuda_op_check
    run_stage ncu-prefill 200 40 env OPCHECK_PREFILL_TOKENS="${GPU_CHECK_NCU_PREFILL_TOKENS:-4096}" \
      OPCHECK_NO_TIMING=1 ncu --clock-control none --kernel-name regex:PagedPrefillWgmma --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section Occupancy --section WarpStateStats --section SchedulerStats --section SourceCounters \
      "$BIN/cuda_op_check" --only prefill
    if [ "${GPU_CHECK_NCU_PREFILL_SOURCE:-0}" = 1 ]; then
      # Per SASS instruction: executions and warp-stall samples by reason (CSV, for a script).
      run_stage ncu-prefill-source 200 40 bash -c "OPCHECK_PREFILL_TOKENS=${GPU_CHECK_NCU_PREFILL_TOKENS:-4096} \
        OPCHECK_NO_TIMING=1 ncu --clock-control none --kernel-name regex:PagedPrefillWgmmaKernel \
        --launch-count 1 --section SourceCounters --section WarpStateStats --page source \
        --print-source sass --csv '$BIN/cuda_op_check' --only prefill > '$OUT_DIR/ncu-prefill-source.csv'"
      python3 scripts/gpu/ncu_source_table.py "$OUT_DIR/ncu-prefill-source.csv" 2>&1 | tee -a "$OUT_DIR/gpu-check.log"
    fi
  fi

  if want variants; then
    # cuda_op_check once per environment of GPU_CHECK_VARIANTS ("A=1 B=2;A=3": ';' between runs),
    # with GPU_CHECK_VARIANT_ARGS (default --only prefill): variants of a kernel that an
    # environment variable picks, in one call.
    [ -x "$BIN/cuda_op_check" ] || unpack cuda_op_check
    local v variants
    IFS=';' read -r -a variants <<< "${GPU_CHECK_VARIANTS:-}"
    for v in "${variants[@]}"; do
      # shellcheck disable=SC2086
      run_stage "variant" 150 20 env $v "$BIN/cuda_op_check" ${GPU_CHECK_VARIANT_ARGS:---only prefill}
    done
  fi

  if want archs; then
    # What each binary holds (issue 19): this repo's parser of .nv_fatbin beside cuobjdump's lists.
    local b f archs_log="$RES/archs.log"
    : > "$archs_log"
    local targets=()
    for b in $BINS; do unpack "$b" > /dev/null 2>&1 && targets+=("$BIN/$b"); done
    if [ -e "$ROOT/.device-carry/e2e/tandem-e2e.tar.xz" ]; then
      mkdir -p "$BIN/e2e" && xz -dc "$ROOT/.device-carry/e2e/tandem-e2e.tar.xz" | tar -C "$BIN/e2e" -xf - tandem \
        && targets+=("$BIN/e2e/tandem")
    fi
    for f in "${targets[@]}"; do
      {
        echo "--- $f"
        python3 tests/tools/fatbin_archs.py "$f" --quiet
        if command -v cuobjdump > /dev/null; then
          echo "cuobjdump --list-elf: $(cuobjdump --list-elf "$f" 2>&1 | grep -o 'sm_[0-9a-z]*' | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"
          echo "cuobjdump --list-ptx: $(cuobjdump --list-ptx "$f" 2>&1 | grep -o 'sm_[0-9a-z]*' | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"
        fi
      } >> "$archs_log" 2>&1
    done
    cat "$archs_log" | tee -a "$OUT_DIR/gpu-check.log"
    note archs "${#targets[@]} binaries listed (archs.log)"
  fi
  if want runner || want golden || want fp8 || want kv-fp8; then
    mkdir -p "$models" && tar xJf models/tiny-qwen3.tar.xz -C "$models"
  fi
  if want runner; then
    if unpack cuda_runner_check; then
      run_stage runner 120 10 "$BIN/cuda_runner_check" "$models/tiny-qwen3" --steps 8
    else note runner "no binary"; fi
  fi
  if want fp8; then
    if unpack cuda_runner_check; then
      # shellcheck disable=SC2086
      run_stage runner-fp8-online 120 10 "$BIN/cuda_runner_check" "$models/tiny-qwen3" --steps 8 \
        --quantization fp8 ${GPU_CHECK_FP8_RUNNER_ARGS:-}
      python3 tests/tools/make_fp8_checkpoint.py "$models/tiny-qwen3" "$models/tiny-qwen3-fp8-block" block
      # shellcheck disable=SC2086
      run_stage runner-fp8-block 120 10 "$BIN/cuda_runner_check" "$models/tiny-qwen3-fp8-block" --steps 8 \
        ${GPU_CHECK_FP8_RUNNER_ARGS:-}
    else note fp8 "no binary"; fi
  fi
  if want kv-fp8; then
    if unpack cuda_runner_check; then
      # shellcheck disable=SC2086
      run_stage runner-kv-fp8 120 10 "$BIN/cuda_runner_check" "$models/tiny-qwen3" --steps 8 \
        --kv-cache-dtype fp8 --tol 0.15 ${GPU_CHECK_KV_FP8_RUNNER_ARGS:-}
      # Calibrated scales from the checkpoint (k_scale / v_scale per layer, model/kv_scales.h).
      python3 tests/tools/make_fp8_checkpoint.py "$models/tiny-qwen3" "$models/tiny-qwen3-kv-scales" none \
        --kv-scales 0.5,0.25
      # shellcheck disable=SC2086
      run_stage runner-kv-scales 120 10 "$BIN/cuda_runner_check" "$models/tiny-qwen3-kv-scales" --steps 8 \
        --kv-cache-dtype fp8 --tol 0.15 ${GPU_CHECK_KV_FP8_RUNNER_ARGS:-}
    else note kv-fp8 "no binary"; fi
  fi
  local have_dump=0
  unpack cuda_peer_dump > /dev/null 2>&1 && have_dump=1
  if want golden; then
    if [ "$have_dump" = 1 ]; then
      run_stage golden 180 20 python3 scripts/gpu/golden_check.py --dump "$BIN/cuda_peer_dump" \
        --model "$models/tiny-qwen3" --json "$RES/golden.json" \
        "$CARRY/golden/tiny-qwen3.json" "$CARRY/golden/tiny-qwen3-long.json"
    else note golden "no cuda_peer_dump ($(unpack cuda_peer_dump 2>&1 | tail -1))"; fi
  fi
  for m in 0.6b 8b; do
    want "peer-$m" || continue
    if [ "$have_dump" = 0 ]; then note "peer-$m" "no cuda_peer_dump"; continue; fi
    local keep=()
    # The bench stage reuses the 8B checkpoint.
    [ "$m" = 8b ] && { want bench || [ "${GPU_CHECK_KEEP:-0}" = 1 ]; } && keep=(--keep)
    [ "$m" = 0.6b ] && [ "${GPU_CHECK_KEEP:-0}" = 1 ] && keep=(--keep)
    run_stage "peer-$m" 360 60 python3 scripts/gpu/peer_check.py --model "$m" \
      --dump "$BIN/cuda_peer_dump" --workdir "$peer_dir" --json "$RES/peer-$m.json" "${keep[@]}"
  done
  for m in 0.6b 8b; do
    want "peer-fp8-$m" || continue
    if [ "$have_dump" = 0 ]; then note "peer-fp8-$m" "no cuda_peer_dump"; continue; fi
    local keep=()
    [ "${GPU_CHECK_KEEP:-0}" = 1 ] && keep=(--keep)
    run_stage "peer-fp8-$m" 360 60 python3 scripts/gpu/peer_check_fp8.py --model "$m" \
      --dump "$BIN/cuda_peer_dump" --workdir "$peer_dir" --json "$RES/peer-fp8-$m.json" "${keep[@]}"
  done

  if want bench || want ncu-step || want ncu-kernel; then
    if unpack cuda_engine_bench; then
      if [ ! -e "$ckpt8/config.json" ]; then
        run_stage make-8b 200 60 python3 scripts/gpu/peer_check.py --model 8b --make-only --keep \
          --workdir "$peer_dir"
      fi
    fi
  fi
  if want bench; then
    if unpack cuda_engine_bench; then
      # shellcheck disable=SC2086
      run_stage bench 360 60 "$BIN/cuda_engine_bench" "$ckpt8" --json "$RES/bench-tandem.json" \
        ${GPU_CHECK_BENCH_ARGS:-}
      # GPU_CHECK_BENCH_BASE=DIR: a pack of an earlier build (DIR/cuda_engine_bench.xz), timed on
      # the same checkpoint in the same call, interleaved: base, this build again, base again.
      # GPU_CHECK_BENCH_BASE_ENV="VAR=VALUE ...": the base run's environment; without
      # GPU_CHECK_BENCH_BASE the base is this build under it (e.g. TANDEM_DECODE_KERNEL=simt: the
      # previous decode kernel beside the new one). GPU_CHECK_BENCH_BASE_ARGS: the base runs'
      # arguments instead of GPU_CHECK_BENCH_ARGS (e.g. bf16 beside --quantization fp8).
      local base=${GPU_CHECK_BENCH_BASE:-} base_bin=""
      if [ -n "$base" ] && [ -e "$ROOT/$base/cuda_engine_bench.xz" ]; then
        mkdir -p "$BIN/base"
        CARRY=$ROOT/$base BIN=$BIN/base unpack cuda_engine_bench
        base_bin=$BIN/base/cuda_engine_bench
      elif [ -n "${GPU_CHECK_BENCH_BASE_ENV:-}" ]; then
        base_bin=$BIN/cuda_engine_bench
      fi
      if [ -n "$base_bin" ]; then
        # shellcheck disable=SC2086
        run_stage bench-base 360 60 env ${GPU_CHECK_BENCH_BASE_ENV:-} "$base_bin" "$ckpt8" \
          --json "$RES/bench-base.json" ${GPU_CHECK_BENCH_BASE_ARGS:-${GPU_CHECK_BENCH_ARGS:-}}
        # shellcheck disable=SC2086
        run_stage bench-2 360 60 "$BIN/cuda_engine_bench" "$ckpt8" --json "$RES/bench-tandem-2.json" \
          ${GPU_CHECK_BENCH_ARGS:-}
        # shellcheck disable=SC2086
        run_stage bench-base-2 360 60 env ${GPU_CHECK_BENCH_BASE_ENV:-} "$base_bin" "$ckpt8" \
          --json "$RES/bench-base-2.json" ${GPU_CHECK_BENCH_BASE_ARGS:-${GPU_CHECK_BENCH_ARGS:-}}
      fi
      if [ "${GPU_CHECK_GRAPHS_COMPARE:-0}" = 1 ]; then
        # shellcheck disable=SC2086
        TANDEM_CUDA_GRAPHS=0 run_stage bench-nographs 360 60 "$BIN/cuda_engine_bench" "$ckpt8" \
          --json "$RES/bench-tandem-nographs.json" ${GPU_CHECK_BENCH_ARGS:-}
      fi
    else note bench "no cuda_engine_bench"; fi
  fi
  if want ncu-step && [ -x "$BIN/cuda_engine_bench" ] && command -v ncu > /dev/null; then
    # Every kernel of a few decode steps at batch GPU_CHECK_NCU_STEP_BATCH (default 1), each run
    # alone by Nsight Compute (clock control and cache flushing off), summed per kernel.
    run_stage ncu-step 240 60 bash -c "ncu --clock-control none --cache-control none \
      --graph-profiling node --metrics gpu__time_duration.sum --csv --page raw --print-units base \
      --launch-count 4000 \
      '$BIN/cuda_engine_bench' '$ckpt8' --batches ${GPU_CHECK_NCU_STEP_BATCH:-1} --prefill 16 \
      --steps 3 --warmup 1 --repeats 1 > '$RES/ncu-step.csv' 2> '$RES/ncu-step.err'"
    python3 scripts/gpu/ncu_step_table.py "$RES/ncu-step.csv" | tee "$RES/ncu-step.txt"
  fi
  if want ncu-kernel && [ -x "$BIN/cuda_engine_bench" ] && command -v ncu > /dev/null; then
    # Nsight Compute's sections (speed of light, memory, warp states, occupancy, scheduler) on the
    # kernels of cuda_engine_bench matching GPU_CHECK_NCU_KERNEL (a regex, default Fp8Gemv),
    # launches GPU_CHECK_NCU_KERNEL_SKIP (default 400) .. + GPU_CHECK_NCU_KERNEL_COUNT (default 4),
    # the bench run with GPU_CHECK_NCU_KERNEL_ARGS (default: FP8 decode at batch 1).
    # shellcheck disable=SC2086
    run_stage ncu-kernel 300 60 bash -c "ncu --clock-control none --graph-profiling node \
      --kernel-name regex:'${GPU_CHECK_NCU_KERNEL:-Fp8Gemv}' --launch-skip ${GPU_CHECK_NCU_KERNEL_SKIP:-400} \
      --launch-count ${GPU_CHECK_NCU_KERNEL_COUNT:-4} --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats \
      '$BIN/cuda_engine_bench' '$ckpt8' ${GPU_CHECK_NCU_KERNEL_ARGS:---quantization fp8 --batches 1 --prefill 16 --steps 3 --warmup 1 --repeats 1} \
      > '$RES/ncu-kernel.txt' 2>&1"
  fi
  if want bench || want ncu-step || want ncu-kernel; then
    [ "${GPU_CHECK_KEEP:-0}" = 1 ] || rm -rf "$ckpt8"
  fi
  if want hf; then
    # shellcheck disable=SC2086
    run_stage hf 300 60 python3 scripts/gpu/hf_bench.py --json "$RES/bench-hf.json" ${GPU_CHECK_HF_ARGS:-}
  fi
  [ "${GPU_CHECK_KEEP:-0}" = 1 ] || rm -rf "$peer_dir"

  # ---- the summary, last ----
  {
    echo
    echo "================ gpu-check summary ($(date -u +%T), $((SECONDS - T_START)) s) ================"
    if [ -e "$OUT_DIR/op_check.log" ] && want ops; then
      sed -n '/==== cuda_op_check summary/,$p' "$OUT_DIR/op_check.log" | grep -v "^ok " | head -5
      echo "cuda_op_check: $(grep -c '^ok ' "$OUT_DIR/op_check.log") ok, $(grep -c '^FAIL' "$OUT_DIR/op_check.log") FAIL (full table: op_check.log)"
    fi
    if [ -e "$OUT_DIR/op_check-base.log" ]; then
      python3 scripts/gpu/op_check_compare.py "$OUT_DIR/op_check.log" "$OUT_DIR/op_check-base.log" \
        "$OUT_DIR/op_check-2.log"
    fi
    [ -e "$RES/runner.log" ] && grep -E "^(ok|FAIL) |cuda_runner_check" "$RES/runner.log"
    [ -e "$RES/golden.log" ] && grep -E "^golden|^FAIL" "$RES/golden.log"
    for m in 0.6b 8b fp8-0.6b fp8-8b; do
      [ -e "$RES/peer-$m.log" ] && grep -E "^(ok|FAIL) |^     greedy|^(FP8 )?peer check" "$RES/peer-$m.log"
    done
    for f in runner-fp8-online runner-fp8-block; do
      [ -e "$RES/$f.log" ] && echo "$f: $(grep -E "^cuda_runner_check" "$RES/$f.log")"
    done
    if [ -e "$RES/bench-tandem.json" ] || [ -e "$RES/bench-hf.json" ]; then
      local t2=()
      [ -e "$RES/bench-tandem-nographs.json" ] && t2=(--tandem2 "$RES/bench-tandem-nographs.json" --tandem2-label "TANDEM_CUDA_GRAPHS=0")
      python3 scripts/gpu/bench_table.py --tandem "$RES/bench-tandem.json" --hf "$RES/bench-hf.json" "${t2[@]}"
    fi
    [ -e "$RES/ncu-step.txt" ] && cat "$RES/ncu-step.txt"
    if [ -e "$RES/bench-base.json" ]; then
      echo "== this build (tandem) beside ${GPU_CHECK_BENCH_BASE:-this build} ${GPU_CHECK_BENCH_BASE_ENV:-} (base), same call: runs 1 and 2"
      python3 scripts/gpu/bench_table.py --tandem "$RES/bench-tandem.json" --tandem2 "$RES/bench-base.json" \
        --tandem2-label base --hf "$RES/bench-hf.json" | grep -E "^(shape|decode|prefill)"
      [ -e "$RES/bench-base-2.json" ] && python3 scripts/gpu/bench_table.py --tandem "$RES/bench-tandem-2.json" \
        --tandem2 "$RES/bench-base-2.json" --tandem2-label base --hf "$RES/bench-hf.json" | grep -E "^(decode|prefill)"
    fi
    for f in "${FAILED[@]}"; do
      echo "--- $f failed; the end of its log:"
      tail -8 "$RES/$f.log"
    done
    echo "stages:"
    printf '  %s\n' "${STATUS[@]}"
  } 2>&1 | tee "$OUT_DIR/summary.txt"
  tar -C "$RES" -czf "$OUT_DIR/results.tar.gz" . 2>/dev/null
  # The exit status: the op check's, else 1 when a stage failed.
  [ "$op_rc" != skipped ] && [ "$op_rc" != 0 ] && return "$op_rc"
  printf '%s\n' "${STATUS[@]}" | grep -qE "exit [1-9]|TIMED OUT|no binary|no cuda" && return 1
  return 0
}

case "${1:-device}" in
  pack) pack ;;
  build-device) build_on_device ;;
  device) device ;;
  *) echo "usage: $0 [pack|build-device|device]" >&2; exit 2 ;;
esac
