"""Horovod's own examples, ported to examples/ (pytorch_mnist, pytorch_synthetic_benchmark,
tensorflow2_keras_mnist, tensorflow2_synthetic_benchmark), run on two ranks with few steps:
each trains or measures and prints its metric; the synthetic benchmarks also print the same loop's
img/sec in one process and the scaling efficiency. A hang fails the test (wall-clock timeout)."""
import re
import subprocess
import sys

import pytest

from launcher import REPO_ROOT, mpi_env, mpirun_command

EXAMPLES = REPO_ROOT / "examples"


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


def assert_scaling_reported(out):
    assert re.search(r"Total img/sec on 2 \w+\(s\): [\d.]+ \+-[\d.]+", out), out
    assert re.search(r"Img/sec with 1 process \(same loop, no communication\): [\d.]+", out), out
    assert re.search(r"Scaling efficiency on 2 \w+\(s\): \d+%", out), out


@pytest.mark.timeout(240)
def test_pytorch_mnist_trains_and_reports_test_accuracy():
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    out = run_two_ranks([EXAMPLES / "pytorch_mnist.py", "--epochs", "1", "--log-interval", "5"], timeout=200)
    assert out.count("Test set: Average loss:") == 1, f"rank 0 alone reports:\n{out}"
    accuracy = float(re.search(r"final test accuracy: ([\d.]+)%", out).group(1))
    assert 0.0 < accuracy <= 100.0, out


@pytest.mark.timeout(240)
def test_pytorch_synthetic_benchmark_reports_img_per_sec_beside_one_process():
    pytest.importorskip("torch")
    out = run_two_ranks([EXAMPLES / "pytorch_synthetic_benchmark.py", "--batch-size", "8", "--num-warmup-batches",
                         "1", "--num-batches-per-iter", "2", "--num-iters", "2"], timeout=200)
    assert_scaling_reported(out)


@pytest.mark.timeout(300)
def test_tensorflow2_keras_mnist_trains_and_rank0_checkpoints(tmp_path):
    pytest.importorskip("tensorflow")
    pytest.importorskip("sklearn")
    out = run_two_ranks([EXAMPLES / "tensorflow2_keras_mnist.py", "--epochs", "2", "--steps-per-epoch", "8",
                         "--checkpoint-dir", tmp_path], timeout=260)
    accuracy = float(re.search(r"final training accuracy \(averaged over ranks\): ([\d.]+)%", out).group(1))
    assert 0.0 < accuracy <= 100.0, out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1.keras", "checkpoint-2.keras"]


@pytest.mark.timeout(300)
def test_tensorflow2_synthetic_benchmark_reports_img_per_sec_beside_one_process():
    pytest.importorskip("tensorflow")
    out = run_two_ranks([EXAMPLES / "tensorflow2_synthetic_benchmark.py", "--num-warmup-batches", "1",
                         "--num-batches-per-iter", "2", "--num-iters", "2"], timeout=260)
    assert out.count("Img/sec per CPU:") == 1, out
    assert_scaling_reported(out)
