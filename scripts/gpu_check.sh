#!/usr/bin/env bash
# horo's GPU checks, for a machine with a CUDA GPU, CUDA torch, an MPI and mpi4py already installed
# (CI has no GPU, so the suite only skips these there):
#   bash scripts/gpu_check.sh [LOGDIR]
# Builds the core in place, then runs tests/test_gpu.py (NCCL at np=1, MPI staging at np=2 on one
# GPU, CuPy, side streams, DistributedOptimizer) and benchmarks/gpu_allreduce.py's four modes.
# Each stage has its own time limit, so one hang costs that stage only; every stage's full log is
# LOGDIR/<stage>.log, and its tail is printed.
set -u
cd "$(dirname "$0")/.."
LOG=${1:-gpu-logs}
mkdir -p "$LOG"
PY=${PYTHON:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
MPIRUN=("$(dirname "$(command -v "$PY")")/mpirun" --oversubscribe --bind-to none --allow-run-as-root)
[ -x "${MPIRUN[0]}" ] || MPIRUN[0]=mpirun

source scripts/stage.sh

stage machine 60 bash -c "nvidia-smi -L; $PY -c 'import sys, torch; print(sys.version); print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.is_available())'; ${MPIRUN[0]} --version | head -1"
stage build 300 "$PY" -m pip install --no-build-isolation --no-deps -e .
stage probe 60 "$PY" -c "import horo; print(horo.gpu_info())"
HORO_TEST_KEEP_GOING=1 TAIL=40 stage tests 330 "$PY" -m pytest -v -rs -p no:cacheprovider tests/test_gpu.py tests/test_gpu_libraries.py
stage bench_nccl 90 "${MPIRUN[@]}" -np 1 "$PY" benchmarks/gpu_allreduce.py nccl --sizes 64,256,1024
stage bench_resnet50 60 "${MPIRUN[@]}" -np 1 "$PY" benchmarks/gpu_allreduce.py resnet50
stage bench_overhead 60 "${MPIRUN[@]}" -np 1 "$PY" benchmarks/gpu_allreduce.py overhead
stage bench_staging 90 env HORO_GPU_TRANSPORT=mpi "${MPIRUN[@]}" -np 2 "$PY" benchmarks/gpu_allreduce.py staging
