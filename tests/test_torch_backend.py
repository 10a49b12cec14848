"""horo as a torch.distributed backend ("horo"), on real MPI ranks (np = 2 and 4), CPU:

- ranks_torch_backend_ops.py: every operation against a NumPy reference, sync, async
  (wait) and through get_future(); subgroups (new_group, new_subgroups, DeviceMesh) on
  process sets; uneven all-to-all splits; point-to-point; a gloo group beside horo;
  errors raised on every rank;
- ranks_torch_backend_training.py: DDP against one process and against DDP over gloo,
  no_sync(), join(), the fp16/bf16/PowerSGD/post-local-SGD hooks, ZeroRedundancyOptimizer,
  FSDP2's fully_shard;
- ranks_torch_backend_pipeline.py: GPipe and 1F1B at 2 and 4 stages against the unsplit
  model, and 2 stages x 2 replicas;
- ranks_torch_backend_launch.py: RANK/WORLD_SIZE against MPI's view, MASTER_ADDR/PORT;
- torchrun without MPI: the error says how to launch.

Each launch runs many checks (one mpirun per suite and size) under a wall-clock timeout.
"""
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import mpi_env

LAUNCH_TIMEOUT = 200
CASES = [
    (2, "ranks_torch_backend_ops.py"),
    (4, "ranks_torch_backend_ops.py"),
    (2, "ranks_torch_backend_training.py"),
    (4, "ranks_torch_backend_training.py"),
    (2, "ranks_torch_backend_pipeline.py"),
    (4, "ranks_torch_backend_pipeline.py"),
    (2, "ranks_torch_backend_launch.py"),
]


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_,suite", CASES, ids=[f"np{n}-{s[len('ranks_torch_backend_'):-3]}" for n, s in CASES])
def test_torch_backend_on_every_rank(ranks, np_, suite):
    ranks(np_, suite, timeout=LAUNCH_TIMEOUT)


_SCRIPT = """
import torch.distributed as dist
import horo.torch
try:
    dist.init_process_group("horo")
except RuntimeError as e:
    print("REFUSED:", e, flush=True)
    raise SystemExit(3)
print("STARTED", flush=True)
"""


@pytest.mark.timeout(120)
def test_torchrun_without_mpi_says_how_to_launch(tmp_path):
    script = tmp_path / "torchrun_horo.py"
    script.write_text(_SCRIPT)
    env = mpi_env()
    with socket.socket() as s:  # torchrun's workers would dial a port of 0 as given
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                           f"--master-port={port}", str(script)], env=env, cwd=str(Path(__file__).parent.parent), capture_output=True,
                          text=True, timeout=100)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert out.count("REFUSED:") == 2, out
    assert "STARTED" not in out
    assert "mpirun -np N" in out and "horo-run" in out, out
