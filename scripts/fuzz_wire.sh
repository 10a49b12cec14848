#!/usr/bin/env bash
# Fuzzes the control-message decoders (csrc/wire/) under AddressSanitizer + UBSan.
#   bash scripts/fuzz_wire.sh [RUNS] [SEED]     default 1000000 inputs, seed 1
#   bash scripts/fuzz_wire.sh --coverage [RUNS] also reports the decoder's lines covered (gcov)
# Builds build/fuzz-asan (or build/fuzz-coverage) with CMake's HORO_FUZZ option.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
coverage=0
if [ "${1:-}" = "--coverage" ]; then coverage=1; shift; fi
runs="${1:-1000000}"
seed="${2:-1}"
python="${HORO_PYTHON:-$(pwd)/.venv/bin/python}"
pybind11_dir="$("$python" -m pybind11 --cmakedir)"
mpicc="$(dirname "$python")/mpicc"
configure=(-DHORO_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DPython_EXECUTABLE=$python" "-Dpybind11_DIR=$pybind11_dir")
[ -x "$mpicc" ] && configure+=("-DMPI_C_COMPILER=$mpicc")
if [ "$coverage" = 1 ]; then
  dir=build/fuzz-coverage
  configure+=(-DHORO_COVERAGE=ON)
else
  dir=build/fuzz-asan
  configure+=(-DHORO_SANITIZE=address,undefined)
fi
cmake -S . -B "$dir" "${configure[@]}" > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
cmake --build "$dir" --target horo_fuzz_wire -j 2 > "$dir.build.log" 2>&1 || { cat "$dir.build.log"; exit 1; }
if [ "$coverage" = 1 ]; then
  find "$dir" -name '*.gcda' -delete
fi
start=$(date +%s%N)
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0:max_allocation_size_mb=64 UBSAN_OPTIONS=print_stacktrace=1 \
  "$dir/horo_fuzz_wire" "$runs" "$seed"
echo "wall time: $(( ($(date +%s%N) - start) / 1000000 )) ms"
if [ "$coverage" = 1 ]; then
  # Line coverage of messages.cc, and of its decoding half (from `class Reader` on) alone.
  objdir="$dir/CMakeFiles/horo_fuzz_wire.dir/csrc/wire"
  (cd "$objdir" && gcov -m messages.cc.gcda | grep -A1 "csrc/wire/messages.cc'")
  awk -F: 'index($0, "class Reader") { on = 1 } on && $1 ~ /#####/ { missed++ } on && $1 ~ /^ *[0-9]+\*?$/ { hit++ }
           END { printf "Reader and encode_/decode_ functions: %d of %d lines executed\n", hit, hit + missed }' \
      "$objdir/messages.cc.gcov"
fi
