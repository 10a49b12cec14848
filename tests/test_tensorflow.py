"""horo.tensorflow on real TensorFlow (CPU) and real MPI ranks (np = 1, 2).

tests/mpi/ranks_tensorflow.py runs inside each rank: every collective on tf tensors
against the NumPy reference, eagerly and inside tf.function, several dtypes; the
gradient of each collective against its analytic value; DistributedGradientTape
training that ends with the weights of one process on the concatenated batch;
IndexedSlices (embedding) gradients; unsupported dtypes and shapes that differ across
ranks raising on every rank. Then examples/tensorflow_gradient_tape.py on 2 ranks.

TensorFlow takes seconds to import per process, so the cases share few launches;
each launch runs under a wall-clock timeout, so a hang fails instead of blocking.
"""
import os
import subprocess
import sys

import pytest

from launcher import REPO_ROOT, mpi_env, mpirun_command

pytest.importorskip("tensorflow")

LAUNCH_TIMEOUT = 240
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_,native", [(1, "1"), (2, "1"), (2, "0")], ids=["np1", "np2", "np2-numpy-function"])
def test_tensorflow_plugin_on_every_rank(ranks, np_, native):
    """On the native ops, and (np2-numpy-function) on the fallback used where they cannot be built."""
    ranks(np_, "ranks_tensorflow.py", env=dict(ENV, HORO_TF_NATIVE=native), timeout=LAUNCH_TIMEOUT)


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
def test_gradient_tape_example_trains_on_two_ranks():
    script = os.path.join(REPO_ROOT, "examples", "tensorflow_gradient_tape.py")
    cmd = mpirun_command(2, [sys.executable, script, "--epochs", "1"])
    try:
        proc = subprocess.run(cmd, cwd=str(REPO_ROOT), env=mpi_env(ENV), capture_output=True, text=True,
                              timeout=LAUNCH_TIMEOUT, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the example HUNG, killed after {LAUNCH_TIMEOUT}s\n{(e.stdout or '')[-5000:]}", pytrace=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    epochs = [line for line in proc.stdout.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 1, out[-8000:]  # printed by rank 0 only
    accuracy = float(epochs[-1].rsplit(" ", 1)[1])
    assert accuracy > 0.85, f"test accuracy {accuracy} after 1 epoch\n{out[-4000:]}"
    assert "ranks: 2, weights identical on every rank: True" in proc.stdout, out[-8000:]
