"""The PyTorch examples and the DDP throughput benchmark run end to end on two ranks
(smoke tests: few epochs / steps; speed is measured by the benchmark itself, not here).

Each runs `mpirun -np 2 ... python <script>` under a wall-clock timeout: a hang fails the test.
"""
import re
import subprocess
import sys

import pytest

from launcher import REPO_ROOT, mpi_env, mpirun_command

torch = pytest.importorskip("torch")


def run_two_ranks(argv, timeout):
    cmd = mpirun_command(2, [sys.executable, *map(str, argv)])
    try:
        proc = subprocess.run(cmd, cwd=str(REPO_ROOT), env=mpi_env(), capture_output=True, text=True,
                              errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(map(str, argv))}: HUNG, killed after {timeout}s\n{e.stdout or ''}", pytrace=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{out[-8000:]}"
    return out


@pytest.mark.timeout(120)
def test_pytorch_digits_trains_and_rank0_alone_reports_and_checkpoints(tmp_path):
    pytest.importorskip("sklearn")
    ckpt = tmp_path / "digits.pt"
    out = run_two_ranks([REPO_ROOT / "examples" / "pytorch_digits.py", "--epochs", "2", "--checkpoint", ckpt],
                        timeout=100)
    epochs = re.findall(r"epoch\s+(\d+)/2\s+train loss ([\d.]+)\s+test accuracy ([\d.]+)%", out)
    assert [e[0] for e in epochs] == ["1", "2"], f"one line per epoch, from rank 0 only:\n{out}"
    assert 10.0 < float(epochs[-1][2]) <= 100.0, out  # learning (chance is 10%); >90% takes the default 10 epochs
    assert out.count("checkpoint written to") == 1, out
    saved = torch.load(ckpt, weights_only=False)
    assert saved["epoch"] == 2 and "conv1.weight" in saved["model"]


@pytest.mark.timeout(120)
def test_pytorch_synthetic_benchmark_reports_throughput():
    out = run_two_ranks([REPO_ROOT / "examples" / "pytorch_synthetic_benchmark.py", "--batch-size", "8",
                         "--num-warmup-batches", "1", "--num-batches-per-iter", "2", "--num-iters", "2"], timeout=100)
    assert out.count("Img/sec per rank:") == 1, out
    assert re.search(r"Total img/sec on 2 rank\(s\): [\d.]+ \+-[\d.]+", out), out


@pytest.mark.timeout(150)
def test_pytorch_ddp_throughput_benchmark_quick(tmp_path):
    out = run_two_ranks([REPO_ROOT / "benchmarks" / "pytorch_ddp_throughput.py", "--quick", "--iters", "1", "--plain",
                         "--json", tmp_path / "ddp.json"], timeout=130)
    for variant in ("horo", "ddp", "no-comm"):
        assert re.search(rf"\| {variant}\s+\|\s+[\d.]+ \|", out), f"no row for {variant}:\n{out}"
    assert "weights identical across ranks: horo yes, ddp yes" in out, out
    assert (tmp_path / "ddp.json").exists()
