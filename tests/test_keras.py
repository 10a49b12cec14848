"""horo.tensorflow.keras (Keras 3 on TensorFlow CPU) across real MPI ranks.

The rank suite tests/mpi/ranks_keras.py runs inside each rank: `model.fit` with the
DistributedOptimizer against a one-process fit on the concatenated batches, the
callbacks, backward_passes_per_step, load_model. Then the example and the benchmark run
end to end on two ranks. TensorFlow costs seconds per process to import, so the cases
share few launches; every launch has a wall-clock timeout (a hang fails, never blocks).
"""
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from launcher import REPO_ROOT, mpi_env, mpirun_command

pytest.importorskip("tensorflow")
pytest.importorskip("keras")

SUITE_TIMEOUT = 150
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}


@pytest.mark.timeout(SUITE_TIMEOUT + 30)
def test_keras_suite_on_two_ranks(ranks):
    ranks(2, "ranks_keras.py", env=ENV, timeout=SUITE_TIMEOUT)


@pytest.mark.timeout(SUITE_TIMEOUT + 30)
def test_keras_suite_on_one_rank(ranks):
    ranks(1, "ranks_keras.py", env=ENV, timeout=SUITE_TIMEOUT)


def run_script(np_, script, *args, timeout):
    """mpirun -np N python script args, in its own session: killed whole on timeout."""
    cmd = mpirun_command(np_, [sys.executable, str(REPO_ROOT / script), *map(str, args)])
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=mpi_env(ENV), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{script} {args}: HUNG, killed after {timeout}s\n{out[-8000:]}", pytrace=False)
    assert proc.returncode == 0, f"{script} {args}: exit code {proc.returncode}\n{out[-8000:]}"
    return out


@pytest.mark.timeout(150)
def test_keras_digits_example_trains_on_two_ranks(tmp_path):
    saved = tmp_path / "digits.keras"
    out = run_script(2, "examples/keras_digits.py", "--epochs", "8", "--save", saved, timeout=120)
    accuracy = float(re.search(r"test accuracy: ([0-9.]+)", out).group(1))
    assert accuracy > 0.85, out[-3000:]
    assert "same on every rank: True" in out
    assert "finished gradual learning rate warmup" in out
    assert saved.exists() and f"model saved to {saved}" in out


@pytest.mark.timeout(200)
def test_keras_scaling_benchmark_quick(tmp_path):
    result = tmp_path / "keras_scaling.json"
    out = run_script(2, "benchmarks/keras_scaling.py", "--quick", "--plain", "--json", result, timeout=170)
    data = json.loads(result.read_text())
    assert data["weights_identical"] is True
    assert {"horo", "1 rank"} <= set(data["results"]) and data["scaling_efficiency"] > 0
    assert "scaling efficiency horo" in out
    # MWMS runs here, or the output says why it did not.
    assert "mwms" in data["results"] or "MultiWorkerMirroredStrategy not measured:" in out
