#!/bin/sh
# Run every libFuzzer target built in BUILD (make build-fuzz) over its seed corpus.
# Usage: scripts/fuzz.sh smoke|long [BUILD]
#   smoke  each target: its seeds + at most FUZZ_RUNS (50000) inputs or FUZZ_SMOKE_SECONDS (30) s,
#          starting from the seeds only (reproducible); `make test` runs this
#   long   each target: FUZZ_SECONDS (300) s; what it learns is kept in BUILD/fuzz-work/corpus
#          and reused next time (make fuzz)
# FUZZ_MAX_LEN (8192) bounds the size of generated inputs: above every limit the fuzzers set.
# A crash, sanitizer report, leak or timeout fails the run; the input is saved under
# BUILD/fuzz-work/artifacts/<name>/ and the command to reproduce it is printed. Add a real bug's
# input to tests/fuzz/corpus/<name>/ as a regression seed.
set -eu
mode="${1:-smoke}"
build="${2:-build-fuzz}"
root=$(cd "$(dirname "$0")/.." && pwd)
work="$build/fuzz-work"
set -- "$build"/fuzz_*
if [ ! -x "$1" ]; then
  echo "fuzz: no fuzzers in $build (make build-fuzz)" >&2
  exit 2
fi
case "$mode" in
  smoke) limits="-runs=${FUZZ_RUNS:-50000} -max_total_time=${FUZZ_SMOKE_SECONDS:-30}" ;;
  long) limits="-max_total_time=${FUZZ_SECONDS:-300}" ;;
  *) echo "usage: $0 smoke|long [build-dir]" >&2; exit 2 ;;
esac
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=""
for bin in "$@"; do
  name=${bin##*/fuzz_}
  seeds="$root/tests/fuzz/corpus/$name"
  if [ "$mode" = smoke ]; then
    corpus="$work/smoke/$name"
    rm -rf "$corpus"
  else
    corpus="$work/corpus/$name"
  fi
  mkdir -p "$corpus" "$work/artifacts/$name"
  [ -d "$seeds" ] || seeds=""
  dict=""
  [ -f "$root/tests/fuzz/fuzz_$name.dict" ] && dict="-dict=$root/tests/fuzz/fuzz_$name.dict"
  log="$work/$name.log"
  start=$(date +%s)
  # shellcheck disable=SC2086
  if "$bin" $limits -max_len="${FUZZ_MAX_LEN:-8192}" -timeout=10 -rss_limit_mb=2048 $dict \
      -artifact_prefix="$work/artifacts/$name/" "$corpus" $seeds >"$log" 2>&1; then
    stats=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -E 's/^#([0-9]+)[[:space:]]+[A-Z]+[[:space:]]+//')
    echo "fuzz_$name: ok ($(($(date +%s) - start)) s; $stats)"
  else
    echo "fuzz_$name: FAILED — log $log" >&2
    grep -E 'ERROR|SUMMARY|check failed|runtime error|Test unit written' "$log" | head -n 20 >&2 || true
    art=$(ls -t "$work/artifacts/$name/" 2>/dev/null | head -n 1)
    [ -n "$art" ] && echo "  reproduce: $bin $work/artifacts/$name/$art" >&2
    failed="$failed fuzz_$name"
  fi
done
if [ -n "$failed" ]; then
  echo "fuzz: failures in$failed" >&2
  exit 1
fi
