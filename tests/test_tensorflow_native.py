"""horo.tensorflow's native op library (plugins/tensorflow/ops, native.py) on real
TensorFlow and real MPI ranks.

tests/mpi/ranks_tensorflow_native.py runs in each rank: collectives that ranks build in
different orders complete with one (and two) inter-op threads at np = 2 and 3; a training
step that allreduces 50 gradients one by one; tf.errors classes for failures; a model
saved with tf.saved_model and loaded here in a fresh job. Then the build cache: reused
by a second run, rebuilt when its key changes (as after a TensorFlow upgrade), and the
numpy_function fallback with its one warning. test_tensorflow.py and test_keras.py run
the whole plugin on the native path, and test_tensorflow.py once on the fallback.
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
@pytest.mark.parametrize("np_", [2, 3], ids=["np2", "np3"])
def test_native_ops_with_one_inter_op_thread(ranks, np_, tmp_path):
    ranks(np_, "ranks_tensorflow_native.py", timeout=LAUNCH_TIMEOUT,
          env=dict(ENV, HORO_TEST_INTER_OP_THREADS="1", HORO_TEST_SAVED_MODEL=str(tmp_path / "model")))
    if np_ == 2:
        run(mpirun_command(2, [sys.executable, str(REPO_ROOT / "tests" / "mpi" / "load_saved_model.py"),
                               str(tmp_path / "model")]), "loaded SavedModel ran its allreduce")


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
def test_native_ops_with_two_inter_op_threads(ranks):
    ranks(2, "ranks_tensorflow_native.py", timeout=LAUNCH_TIMEOUT, select="order or fifty",
          env=dict(ENV, HORO_TEST_INTER_OP_THREADS="2"))


def run(cmd, must_print, env=None):
    try:
        proc = subprocess.run(cmd, cwd=str(REPO_ROOT), env=mpi_env(dict(ENV, **(env or {}))), capture_output=True,
                              text=True, timeout=LAUNCH_TIMEOUT, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{cmd}: HUNG, killed after {LAUNCH_TIMEOUT}s\n{(e.stdout or '')[-5000:]}", pytrace=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    assert must_print in out, out[-8000:]
    return out


# The library built for this TensorFlow (the user's cache, shared with the other tests) is
# copied into an empty cache as a first run would leave it; only the changed key compiles.
BUILD_PROBE = """
import os, shutil, sys
from horo.tensorflow import native
built = native.ensure_built()
os.environ["HORO_CACHE_DIR"] = sys.argv[1]
cxx = native.compiler()
first = native.library_path(cxx, native.build_key(cxx))
first.parent.mkdir(parents=True)
shutil.copy2(built, first)
stamp = first.stat().st_mtime_ns
again = native.ensure_built()
assert again == first and again.stat().st_mtime_ns == stamp, "the cached library was rebuilt"
other = native.ensure_built(key_extra="a different TensorFlow")
assert other != first and other.exists(), (first, other)
assert first.exists() and first.stat().st_mtime_ns == stamp
print("cache ok:", sorted(p.name for p in first.parent.glob("*.so")))
"""


@pytest.mark.timeout(2 * LAUNCH_TIMEOUT)
def test_build_cache_is_reused_and_rebuilt_when_its_key_changes(tmp_path):
    out = run([sys.executable, "-c", BUILD_PROBE, str(tmp_path / "cache")], "cache ok:")
    assert out.count(".so'") == 2, out


FALLBACK_PROBE = """
import logging
logging.basicConfig(level=logging.WARNING)
import horo.tensorflow as hvd
from horo.tensorflow import core_ops, native
assert not core_ops.uses_native_ops
print("path:", native.describe())
"""


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
def test_fallback_says_once_what_is_lost():
    out = run([sys.executable, "-c", FALLBACK_PROBE], "path: tf.numpy_function fallback (HORO_TF_NATIVE=0)",
              env={"HORO_TF_NATIVE": "0"})
    assert out.count("native TensorFlow ops unavailable") == 1, out
    assert "deadlock" in out and "saved_model" in out, out
