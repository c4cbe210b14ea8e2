#!/usr/bin/env bash
# Sanitizer runs of the test suites (issue 21), each in its own build directory, CUDA off:
#
#   scripts/sanitize.sh asan     ASan + UBSan (a UB report aborts): every test (build-asan/, ctest)
#   scripts/sanitize.sh tsan     TSan: the runtime (rpc, worker, events, discovery), router, transfer and engine
#                                unit tests (build-tsan/)
#   scripts/sanitize.sh          both
#
# Options: -R REGEX (only the ctest tests matching it; for test binaries run directly, a gtest
# filter), -s "SUITES" (asan: only these test binaries, built and run one by one, instead of the
# whole build and ctest), --build-only, --no-build.
# Environment: SANITIZE_JOBS (build jobs, nproc), SANITIZE_TEST_JOBS (ctest -j, 2), SANITIZE_NICE (5),
# SANITIZE_CXX (the compiler, default c++; clang++ works too), TSAN_SUITES (test binaries for tsan),
# TSAN_DEPS (a prefix from scripts/tsan-deps.sh: TSan-built gRPC and abseil; the tsan build then
# goes to build-tsan-deps/, finds gRPC and absl there first (CMAKE_PREFIX_PATH; refuses to go on if
# CMake found them elsewhere) and runs with the prefix's lib/ on LD_LIBRARY_PATH and with
# scripts/tsan-deps.supp instead of scripts/tsan.supp (unless TSAN_OPTIONS is set); unset, Debian's).
# Logs: <build dir>/sanitize-logs/. Prints a table last: build, suite, tests run, failed, sanitizer
# reports; exits 1 when a test failed or any sanitizer reported.
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=${SANITIZE_JOBS:-$(nproc)}
TEST_JOBS=${SANITIZE_TEST_JOBS:-2}
NICE=${SANITIZE_NICE:-5}
CXX_BIN=${SANITIZE_CXX:-c++}
CC_BIN=${SANITIZE_CC:-$( [ "$CXX_BIN" = clang++ ] && echo clang || echo cc )}
TSAN_SUITES=${TSAN_SUITES:-"test_rpc test_worker test_events test_discovery test_router test_transfer test_engine"}
KINDS=()
ASAN_SUITES=""
REGEX=""
BUILD=1
TEST=1
while (($#)); do
  case "$1" in
    asan|tsan) KINDS+=("$1"); shift ;;
    -R) REGEX=$2; shift 2 ;;
    -s) ASAN_SUITES=$2; shift 2 ;;
    --build-only) TEST=0; shift ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "sanitize.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
((${#KINDS[@]})) || KINDS=(asan tsan)

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# tsan.supp is for Debian's uninstrumented gRPC; with TSAN_DEPS it would hide and create reports.
TSAN_SUPP=scripts/tsan.supp
[ -n "${TSAN_DEPS:-}" ] && TSAN_SUPP=scripts/tsan-deps.supp
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:second_deadlock_stack=1:history_size=4:suppressions=$PWD/$TSAN_SUPP}

rows=()
status=0

configure() {  # dir flags [cmake args...]
  local dir=$1 flags=$2
  shift 2
  [ -f "$dir/build.ninja" ] && return 0
  CC=$CC_BIN CXX=$CXX_BIN cmake -S . -B "$dir" -G Ninja -DTANDEM_CUDA=OFF -DTANDEM_BUILD_BENCH=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" "$@" > "$dir.configure.log" \
    || { cat "$dir.configure.log"; exit 1; }
}

# Runs ctest in `dir` (tests matching `regex`), adds a row.
run_suite() {  # dir kind label regex
  local dir=$1 kind=$2 label=$3 regex=$4
  local logdir=$dir/sanitize-logs
  mkdir -p "$logdir"
  local log=$logdir/$label.log
  local args=(--output-on-failure -j "$TEST_JOBS" --timeout 1800)
  [ -n "$regex" ] && args+=(-R "$regex")
  # The chaos run (tests/chaos) has latency goals: under ASan its five CPU workers on a 2-core box
  # miss them (2026-12-02: 18 requests past its timeout, 0 sanitizer reports). Run it by hand here
  # with `ctest -R chaos` for the reports; `-R chaos` also brings it back into this run.
  [ -z "$regex" ] && args+=(-E '^chaos_across_test_hosts$')
  set +e
  (cd "$dir" && nice -n "$NICE" ctest "${args[@]}") > "$log" 2>&1
  local rc=$?
  set -e
  local ran failed reports
  ran=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2/p' "$log" | tail -1)
  failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  # Every report, also from processes the tests start (their output lands in ctest's log).
  reports=$(cat "$log" "$dir/Testing/Temporary/LastTest.log" 2>/dev/null |
            grep -cE '^==[0-9]+==ERROR: (Address|Leak)Sanitizer|runtime error: |^WARNING: ThreadSanitizer' || true)
  rows+=("$kind	$label	${ran:-?}	${failed:-?}	$reports")
  if ((rc != 0)) || ((reports > 0)); then
    status=1
    echo "sanitize.sh: $kind $label: $failed failed, $reports reports (log: $log)" >&2
  fi
}

# Runs one gtest binary of `dir`/tests (filter: -R as a gtest filter), adds a row.
run_binary() {  # dir kind suite
  local dir=$1 kind=$2 suite=$3
  local logdir=$dir/sanitize-logs
  mkdir -p "$logdir"
  local log=$logdir/$suite.log
  local args=()
  [ -n "$REGEX" ] && args+=("--gtest_filter=$REGEX")
  set +e
  (cd "$dir/tests" && nice -n "$NICE" timeout 3600 "./$suite" "${args[@]}") > "$log" 2>&1
  local rc=$?
  set -e
  local ran failed reports
  ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests* from .* ran\..*/\1/p' "$log" | tail -1)
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests*, listed below.*/\1/p' "$log" | tail -1)
  ((rc != 0)) && [ -z "$failed" ] && failed="exit $rc"
  reports=$(grep -cE '^==[0-9]+==ERROR: (Address|Leak)Sanitizer|runtime error: |^WARNING: ThreadSanitizer' "$log" || true)
  rows+=("$kind	$suite	${ran:-?}	${failed:-0}	$reports")
  if ((rc != 0)) || ((reports > 0)); then
    status=1
    echo "sanitize.sh: $kind $suite: failed ${failed:-0}, $reports reports (log: $log)" >&2
  fi
}

for kind in "${KINDS[@]}"; do
  case "$kind" in
    asan)
      dir=build-asan
      configure "$dir" "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
      if [ -n "$ASAN_SUITES" ]; then
        for suite in $ASAN_SUITES; do
          if ((BUILD)); then nice -n "$NICE" cmake --build "$dir" -j "$JOBS" --target bundled_model "$suite"; fi
          if ((TEST)); then run_binary "$dir" asan "$suite"; fi
        done
      else
        if ((BUILD)); then nice -n "$NICE" cmake --build "$dir" -j "$JOBS"; fi
        if ((TEST)); then
          bash scripts/test-setup.sh
          run_suite "$dir" asan "all-tests" "$REGEX"
        fi
      fi
      ;;
    tsan)
      dir=build-tsan
      deps=()
      if [ -n "${TSAN_DEPS:-}" ]; then
        dir=build-tsan-deps
        deps=(-DCMAKE_PREFIX_PATH="$TSAN_DEPS")
        export LD_LIBRARY_PATH=$TSAN_DEPS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      fi
      # UCX's memory hooks (malloc/mmap patching) crash a TSan process at its first transfer
      # test; OpenBLAS's own threads are not instrumented (races reported inside sgemm).
      export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
      export OPENBLAS_NUM_THREADS=1
      configure "$dir" "-fsanitize=thread -fno-omit-frame-pointer" "${deps[@]}"
      if [ -n "${TSAN_DEPS:-}" ]; then
        for pkg in gRPC absl; do
          grep -q "^${pkg}_DIR:PATH=$TSAN_DEPS/" "$dir/CMakeCache.txt" && continue
          echo "sanitize.sh: $dir did not take $pkg from $TSAN_DEPS:" >&2
          grep "^${pkg}_DIR:" "$dir/CMakeCache.txt" >&2
          exit 1
        done
      fi
      if ((BUILD)); then
        # shellcheck disable=SC2086
        nice -n "$NICE" cmake --build "$dir" -j "$JOBS" --target bundled_model $TSAN_SUITES
      fi
      if ((TEST)); then
        for suite in $TSAN_SUITES; do run_binary "$dir" tsan "$suite"; done
      fi
      ;;
  esac
done

if ((TEST)); then
  printf '\n%-6s %-16s %8s %8s %8s\n' build suite tests failed reports
  for row in "${rows[@]}"; do
    IFS=$'\t' read -r k l r f n <<< "$row"
    printf '%-6s %-16s %8s %8s %8s\n' "$k" "$l" "$r" "$f" "$n"
  done
fi
exit $status
