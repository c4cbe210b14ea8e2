#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, no CUDA) into their own build
# directory and runs each, one at a time, under nice; prints a table last.
#
#   scripts/fuzz.sh                      every target for FUZZ_TIME seconds (default 60)
#   scripts/fuzz.sh -t 600 tokenizer     one target for 10 minutes
#   scripts/fuzz.sh -r 1000000           every target for a million executions
#   scripts/fuzz.sh --seeds              only the committed seed corpus, once (a regression run)
#   scripts/fuzz.sh --ci                 as CI runs it: the seeds, then each target 15 s; exits 0
#                                        with a message when clang or libFuzzer is missing
#   scripts/fuzz.sh --build-only
#   scripts/fuzz.sh --fast -r 10000000 grammar
#                                        UBSan alone, -O2, no comparison tracing (build-fuzz-fast/):
#                                        3-4x the executions a second of the ASan build for the slow
#                                        targets (chat_template 2,494 against 662 here)
#   scripts/fuzz.sh --replay build-fuzz-fast/corpus grammar
#                                        every input another run kept (DIR/<target>/), once, through
#                                        this build's (ASan) target
#
# Environment: FUZZ_BUILD_DIR (build-fuzz; build-fuzz-fast with --fast), FUZZ_TIME, FUZZ_RUNS,
# FUZZ_JOBS (build jobs, nproc), FUZZ_NICE (5), FUZZ_MAX_LEN (libFuzzer's -max_len for every target;
# default per target, 2-8 KiB). The committed seeds are tests/fuzz/corpus/<target>/; what a run finds
# goes to $FUZZ_BUILD_DIR/corpus/<target>/ (kept between runs, never into the tree), crashes to
# $FUZZ_BUILD_DIR/artifacts/<target>/. Each run appends its row to $FUZZ_BUILD_DIR/fuzz-stats.tsv.
# Exit status: 1 when a target crashed (or leaked, hung, ran out of memory), else 0.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

BUILD_DIR=${FUZZ_BUILD_DIR:-}
ASAN=1
REPLAY=""
TIME=${FUZZ_TIME:-60}
RUNS=${FUZZ_RUNS:-}
NICE=${FUZZ_NICE:-5}
JOBS=${FUZZ_JOBS:-$(nproc)}
MODE=time
CI=0
BUILD_ONLY=0
TARGETS=()
ALL_TARGETS=(http_request openai_request tokenizer chat_template grammar kv_event_codec tcp_wire cuda_ipc_control
             fabric_control graph_yaml tool_call_parse)

while (($#)); do
  case "$1" in
    -t) TIME=$2; MODE=time; shift 2 ;;
    -r) RUNS=$2; MODE=runs; shift 2 ;;
    --seeds) MODE=seeds; shift ;;
    --ci) CI=1; TIME=${FUZZ_TIME:-15}; MODE=time; shift ;;
    --build-only) BUILD_ONLY=1; shift ;;
    --fast) ASAN=0; shift ;;
    --replay) REPLAY=$(realpath "$2"); MODE=replay; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
[ -n "$RUNS" ] && [ "$MODE" = time ] && MODE=runs
[ -n "$BUILD_DIR" ] || { ((ASAN)) && BUILD_DIR=build-fuzz || BUILD_DIR=build-fuzz-fast; }
((${#TARGETS[@]})) || TARGETS=("${ALL_TARGETS[@]}")

# clang and its libFuzzer runtime (Debian: the clang package).
missing=""
command -v clang >/dev/null && command -v clang++ >/dev/null || missing="clang/clang++ not found"
if [ -z "$missing" ]; then
  rt=$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null || true)
  [ -f "$rt" ] || rt=$(find "$(clang -print-resource-dir 2>/dev/null)" -name 'libclang_rt.fuzzer*.a' 2>/dev/null | head -1)
  [ -n "$rt" ] && [ -f "$rt" ] || missing="clang has no libFuzzer runtime (libclang_rt.fuzzer)"
fi
if [ -n "$missing" ]; then
  if ((CI)); then
    echo "fuzz.sh: SKIPPED: $missing (install clang: scripts/setup.sh lists it)"
    exit 0
  fi
  echo "fuzz.sh: $missing" >&2
  exit 1
fi

# ---- build ----
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  opt=-O1
  ((ASAN)) || opt="-O2 -fno-sanitize-coverage=trace-cmp"  # edges still counted; no value profile
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DTANDEM_FUZZ=ON -DTANDEM_CUDA=OFF \
    -DTANDEM_FUZZ_ASAN=$( ((ASAN)) && echo ON || echo OFF) \
    -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_FLAGS_DEBUG="$opt -g" -DCMAKE_CXX_FLAGS_DEBUG="$opt -g" > "$BUILD_DIR.configure.log" \
    || { cat "$BUILD_DIR.configure.log"; exit 1; }
fi
bins=()
for t in "${TARGETS[@]}"; do bins+=("${t}_fuzz"); done
nice -n "$NICE" cmake --build "$BUILD_DIR" -j "$JOBS" --target bundled_model "${bins[@]}"
((BUILD_ONLY)) && exit 0

# ---- run ----
max_len() {
  [ -n "${FUZZ_MAX_LEN:-}" ] && { echo "$FUZZ_MAX_LEN"; return; }
  case "$1" in
    http_request) echo 8192 ;;
    tokenizer|fabric_control) echo 2048 ;;
    *) echo 4096 ;;
  esac
}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$BUILD_DIR/logs"
rows=()
failed=0
for t in "${TARGETS[@]}"; do
  bin=$BUILD_DIR/tests/fuzz/${t}_fuzz
  seeds=$ROOT/tests/fuzz/corpus/$t
  work=$BUILD_DIR/corpus/$t
  art=$BUILD_DIR/artifacts/$t
  log=$BUILD_DIR/logs/$t.log
  mkdir -p "$work" "$art" "$seeds"
  before=$(find "$art" -type f | wc -l)
  common=(-max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=3072 -print_final_stats=1
          -artifact_prefix="$art/")
  set +e
  case "$MODE" in
    seeds) nice -n "$NICE" "$bin" "${common[@]}" -runs=0 "$seeds" > "$log" 2>&1 ;;
    replay) nice -n "$NICE" "$bin" "${common[@]}" -runs=0 "$REPLAY/$t" > "$log" 2>&1 ;;
    runs) nice -n "$NICE" "$bin" "${common[@]}" -runs="$RUNS" "$work" "$seeds" > "$log" 2>&1 ;;
    time) nice -n "$NICE" "$bin" "${common[@]}" -max_total_time="$TIME" "$work" "$seeds" > "$log" 2>&1 ;;
  esac
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  crashes=$(( $(find "$art" -type f | wc -l) - before ))
  if ((rc != 0)) && ((crashes == 0)); then crashes=1; fi  # died without an artifact
  if ((crashes)); then
    failed=1
    echo "fuzz.sh: $t FAILED (exit $rc); the log: $log" >&2
    grep -m1 -A30 -E '^==[0-9]+==ERROR|runtime error|invariant broken|deadly signal|ERROR: libFuzzer' "$log" >&2 || tail -40 "$log" >&2
  fi
  dirs=("$work" "$seeds")
  [ "$MODE" = replay ] && dirs=("$REPLAY/$t")
  corpus=$(find "${dirs[@]}" -type f | wc -l)
  kb=$(( $(find "${dirs[@]}" -type f -printf '%s\n' | awk '{n += $1} END {print n + 0}') / 1024 ))
  row=$(printf '%s\t%s\t%s\t%s\t%s (%s KiB)' "$t" "${execs:-?}" "${rate:-?}" "$crashes" "$corpus" "$kb")
  rows+=("$row")
  printf '%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$MODE" "$row" >> "$BUILD_DIR/fuzz-stats.tsv"
done

printf '\n%-18s %14s %10s %8s %s\n' target executions exec/s crashes corpus
for row in "${rows[@]}"; do
  IFS=$'\t' read -r t e r c k <<< "$row"
  printf '%-18s %14s %10s %8s %s\n' "$t" "$e" "$r" "$c" "$k"
done
exit $failed
