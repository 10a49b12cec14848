"""Checks the environment's HORO_* / HOROVOD_* names at init, so a misspelt knob is not silently ignored.

Known names: the core's tunables table (and their Horovod aliases), plus the knobs that the
build, the set-up scripts, the launcher and the tests read themselves (below).
"""
import difflib
import logging
import os
import sys

_log = logging.getLogger("horo")

# Read outside the core: build / install (setup.py, horo/_native.py), scripts/, horo-bench, tests.
NON_CORE_NAMES = {
    "HORO_MPI": "which MPI: wheel (default) | system | a path to libmpi",
    "HORO_MPICC": "the MPI compiler wrapper the build uses",
    "HORO_SYSTEM_MPI": "scripts/setup.sh: use the system MPI",
    "HORO_PYTHON": "scripts/setup.sh: interpreter for the venv",
    "HORO_VENV": "scripts/setup.sh: venv location",
    "HORO_FORCE_REBUILD": "scripts/setup.sh: rebuild the core",
    "HORO_BUILD_TYPE": "CMake build type",
    "HORO_DEMO_NP": "scripts/demo.sh: ranks",
    "HORO_DEMO_TIMEOUT": "scripts/demo.sh: time limit",
    "HORO_BENCH_COLOR": "horo-bench: colour output",
    "HORO_SANITIZE": "build the core with these sanitizers (setup.py, CMake)",
    "HORO_GPU_TEST_WHEELS": "scripts/setup.sh: 0 skips the NCCL/CUDA runtime wheels the GPU loader tests use",
    "HORO_TF_NATIVE": "0: TensorFlow collectives through tf.numpy_function instead of the native op library",
    "HORO_CACHE_DIR": "where the TensorFlow op library is built and cached",
    "HORO_CLUSTER_NAME": "scripts/cluster.sh: the namespaced test cluster's name",
    "HORO_CLUSTER_HOSTS": "scripts/cluster.sh: the namespaced test cluster's hosts",
    "HORO_SLURM_NAME": "scripts/slurm.sh: the local Slurm cluster's name",
    "HORO_CLUSTER_STATE": "scripts/cluster.sh: where the test cluster keeps its state",
}
NON_CORE_PREFIXES = ("HORO_TEST_", "HORO_ELASTIC_")  # HORO_ELASTIC_*: horo-run's elastic driver to its ranks

# Horovod's variables that have no meaning in horo (its autotuner, other controllers, GPU
# knobs of Horovod's own CUDA path): honoured by Horovod, ignored here, so say so.
HOROVOD_IGNORED = (
    "HOROVOD_AUTOTUNE", "HOROVOD_AUTOTUNE_LOG", "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS",
    "HOROVOD_MPI_THREADS_DISABLE", "HOROVOD_DISABLE_GROUP_FUSION", "HOROVOD_ADASUM_MPI_CHUNK_SIZE",
    "HOROVOD_THREAD_AFFINITY", "HOROVOD_LOG_HIDE_TIME", "HOROVOD_GLOO_TIMEOUT_SECONDS",
)


def known_names(core_rows):
    names = set(NON_CORE_NAMES)
    for row in core_rows:
        names.add(row["env"])
        if row.get("horovod_alias"):
            names.add(row["horovod_alias"])
    return names


def unknown_name_messages(environ, core_rows):
    """One message per HORO_* name nobody reads (with the closest known name) or ignored HOROVOD_* name."""
    known = known_names(core_rows)
    horo_known = sorted(n for n in known if n.startswith("HORO_"))
    messages = []
    for name in sorted(environ):
        if name.startswith("HORO_") and name not in known and not name.startswith(NON_CORE_PREFIXES):
            close = difflib.get_close_matches(name, horo_known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else " (horo.tunables() lists the known ones)"
            messages.append(f"environment variable {name} is not a horo setting and is ignored{hint}")
        elif name in HOROVOD_IGNORED:
            messages.append(f"environment variable {name} (a Horovod setting) has no effect in horo")
    return messages


_warned = False


def warn_about_unknown_names(core_rows, environ=None):
    """Logs each message once per process (init may run again after shutdown)."""
    global _warned
    if _warned:
        return
    _warned = True
    for message in unknown_name_messages(os.environ if environ is None else environ, core_rows):
        # As the core's own warnings: on stderr, and to logger "horo" for applications that route
        # it (horo gives that logger a NullHandler, so Python's last-resort printer stays quiet).
        print(f"[horo WARNING] {message}", file=sys.stderr, flush=True)
        _log.warning(message)
