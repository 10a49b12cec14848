#!/usr/bin/env bash
# Runs test files against a core built with AddressSanitizer + UBSan (CMake's HORO_SANITIZE).
#   bash scripts/sanitize_suite.sh [TEST_FILE ...]    default: the NumPy-level multi-rank files below
# Builds build/sanitize/ (the core only), copies the Python package into build/sanitize/tree/
# in the installed layout (horo/, horo/torch, horo/tensorflow from plugins/) with the sanitized
# _core next to it, and runs pytest there: the working tree's own build is left alone.
# Every python process (driver, ranks, single-process scripts) gets libasan preloaded; leak
# checking is off (CPython and MPI keep memory until exit by design); any ASan or UBSan report
# aborts its process, which fails its test; reports are also collected from the logs at the end.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$(pwd)"
python="${HORO_PYTHON:-$root/.venv/bin/python}"
dir=build/sanitize
files=("$@")
if [ "${#files[@]}" = 0 ]; then
  files=(tests/test_allreduce.py tests/test_collectives.py tests/test_errors.py tests/test_errors_stay_collective.py
         tests/test_process_sets.py tests/test_shm.py tests/test_join.py tests/test_soak.py tests/test_async_order.py
         tests/test_shutdown.py tests/test_init_comm.py tests/test_single_process.py tests/test_bad_input.py
         tests/test_stall.py tests/test_timeline.py tests/test_killed_rank.py)
fi

pybind11_dir="$("$python" -m pybind11 --cmakedir)"
mpicc="$(dirname "$python")/mpicc"
configure=(-DHORO_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DPython_EXECUTABLE=$python"
           "-Dpybind11_DIR=$pybind11_dir")
[ -x "$mpicc" ] && configure+=("-DMPI_C_COMPILER=$mpicc")
mkdir -p "$dir"
cmake -S . -B "$dir" "${configure[@]}" > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir" --target _core -j 2 > "$dir/build.log" 2>&1 || { tail -50 "$dir/build.log"; exit 1; }
core="$(find "$dir" -maxdepth 1 -name '_core*.so' | head -1)"
[ -n "$core" ] || { echo "no _core*.so in $dir"; exit 1; }

# The tree the tests run in: the working tree's Python and tests, the sanitized core.
tree="$dir/tree"
rm -rf "$tree" && mkdir -p "$tree"
cp -r horo tests examples benchmarks pyproject.toml "$tree"/
[ -f setup.cfg ] && cp setup.cfg "$tree"/
rm -f "$tree"/horo/_core*.so
cp -r plugins/torch "$tree/horo/torch"
cp -r plugins/tensorflow "$tree/horo/tensorflow"
cp "$core" "$tree/horo/"

libasan="$(gcc -print-file-name=libasan.so)"
# libstdc++ preloaded too: python does not link it, and when it arrives later (dlopen of _core)
# ASan's __cxa_throw interceptor has no real function to call and aborts at the first C++ throw.
libstdcxx="$(gcc -print-file-name=libstdc++.so)"
logs="$root/$dir/logs"
rm -rf "$logs" && mkdir -p "$logs"
export LD_PRELOAD="$libasan:$libstdcxx${LD_PRELOAD:+:$LD_PRELOAD}"
# log_path: every process writes its report to a file of its own as well as failing.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:log_path=$logs/asan:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"
export HORO_TEST_SANITIZED=1  # lets a test that cannot run under ASan say why (none today)

cd "$tree"
summary=()
for f in "${files[@]}"; do
  echo "=== $f"
  out="$logs/$(basename "$f" .py).out"
  start=$(date +%s)
  # The soak bounds RSS growth (5 MB): ASan's quarantine keeps freed blocks (up to 256 MB) on
  # purpose, which that bound would count, so the soak runs without it (bounds checks stay on).
  extra=""
  case "$f" in *test_soak.py) extra=":quarantine_size_mb=0:thread_local_quarantine_size_kb=0" ;; esac
  ASAN_OPTIONS="$ASAN_OPTIONS$extra" "$python" -m pytest -q -p no:cacheprovider -m "not slow" "$f" > "$out" 2>&1
  rc=$?
  line="$(grep -E '^[0-9]+ (passed|failed)|^(=+ )?[0-9]+ (passed|failed|error)|passed|failed' "$out" | tail -1)"
  summary+=("$f rc=$rc $(( $(date +%s) - start ))s: $line")
  echo "${summary[-1]}"
done
cd "$root"
echo
echo "=== summary (ASan+UBSan core: $core)"
printf '%s\n' "${summary[@]}"
reports=$(ls "$logs"/asan.* "$logs"/ubsan.* 2>/dev/null | wc -l)
echo "sanitizer reports: $reports file(s) in $logs"
for r in "$logs"/asan.* "$logs"/ubsan.*; do
  [ -f "$r" ] && { echo "--- $r"; head -40 "$r"; }
done
exit 0
