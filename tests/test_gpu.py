"""horo's GPU path end to end (tests/mpi/ranks_gpu.py), on a machine with a CUDA
GPU and a CUDA build of torch; skipped, with the reason, everywhere else (CI has
no GPU: tests/test_gpu_libraries.py covers what can be checked without one).

- np=1 through NCCL (HORO_GPU_TRANSPORT=nccl: a refusal fails instead of falling back);
- np=2 on one GPU through MPI staging: `auto` must pick it (NCCL refuses two ranks on
  one GPU), and `nccl` must fail on every rank saying why;
- np=2 with HORO_GPU_TRANSPORT=mpi.
"""
import functools
import subprocess
import sys

import pytest

from launcher import REPO_ROOT, mpi_env

LAUNCH_TIMEOUT = 240


@functools.lru_cache(maxsize=None)
def gpu_skip_reason():
    # Asked in a child: torch.cuda and horo's loader stay out of the pytest process.
    probe = ("import torch, horo; info = horo.gpu_info();"
             "print('no CUDA build of torch' if not torch.cuda.is_available() else "
             "'' if info.device_count > 0 else 'horo sees no GPU: ' + str(info.cuda_reason))")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=str(REPO_ROOT), env=mpi_env(), capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0:
        return f"GPU probe failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
    return proc.stdout.strip()


def needs_gpu():
    reason = gpu_skip_reason()
    if reason:
        pytest.skip(f"no GPU visible: {reason}")


CASES = [(1, "nccl"), (2, "auto"), (2, "mpi")]


@pytest.mark.timeout(LAUNCH_TIMEOUT + 150)
@pytest.mark.parametrize("np_,transport", CASES, ids=[f"np{n}-{t}" for n, t in CASES])
def test_gpu_collectives(ranks, np_, transport):
    needs_gpu()
    ranks(np_, "ranks_gpu.py", env={"HORO_GPU_TRANSPORT": transport}, timeout=LAUNCH_TIMEOUT)


@pytest.mark.timeout(LAUNCH_TIMEOUT + 150)
def test_nccl_refuses_two_ranks_on_one_gpu_on_every_rank(ranks):
    needs_gpu()
    rc, out = ranks(2, "ranks_gpu.py", env={"HORO_GPU_TRANSPORT": "nccl", "CUDA_VISIBLE_DEVICES": "0"},
                    timeout=LAUNCH_TIMEOUT, select="every_dtype_and_op and float32 and Sum", check=False)
    assert rc != 0 and out.count("NCCL cannot serve") >= 2 and "share the GPU" in out, out[-4000:]
