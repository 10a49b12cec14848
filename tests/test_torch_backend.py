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
- ranks_torch_backend_lightning.py: Lightning's DDPStrategy over horo against gloo;
- torchrun without MPI: the error says how to launch;
- examples/torch_ddp.py over horo and gloo print the same losses; torch_pipeline.py trains.

Each launch runs many checks (one mpirun per suite and size) under a wall-clock timeout.
"""
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import REPO_ROOT, mpi_env, mpirun_command

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


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
def test_lightning_ddp_strategy_on_horo(ranks):
    pytest.importorskip("lightning")
    ranks(2, "ranks_torch_backend_lightning.py", timeout=LAUNCH_TIMEOUT)


def _run_example(np_, argv, timeout=120):
    cmd = mpirun_command(np_, [sys.executable, str(REPO_ROOT / "examples" / argv[0]), *argv[1:]])
    try:
        proc = subprocess.run(cmd, cwd=str(REPO_ROOT), env=mpi_env(), capture_output=True, text=True,
                              errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{argv}: HUNG, killed after {timeout}s\n{e.stdout or ''}", pytrace=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{argv}: exit code {proc.returncode}\n{out[-6000:]}"
    return out


@pytest.mark.timeout(300)
def test_torch_ddp_example_same_losses_over_horo_and_gloo():
    pytest.importorskip("sklearn")
    losses = {}
    for backend in ("horo", "gloo"):
        out = _run_example(2, ["torch_ddp.py", "--epochs", "2", "--batch-size", "64", "--backend", backend])
        losses[backend] = re.findall(r"epoch (\d)/2\s+train loss ([\d.]+)\s+test accuracy ([\d.]+)%", out)
        assert [e[0] for e in losses[backend]] == ["1", "2"], out
    assert losses["horo"] == losses["gloo"]


@pytest.mark.timeout(200)
def test_torch_pipeline_example_trains_with_1f1b():
    pytest.importorskip("sklearn")
    out = _run_example(2, ["torch_pipeline.py", "--epochs", "3", "--schedule", "1f1b", "--width", "64"])
    losses = [float(v) for v in re.findall(r"epoch \d/3\s+loss ([\d.]+)", out)]
    assert len(losses) == 3 and losses[-1] < losses[0] < 2.4, out
