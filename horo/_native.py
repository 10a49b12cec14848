"""Loads the compiled core.

libmpi is made globally visible first: Open MPI's plugins (and mpi4py, if the
user imports it) resolve MPI symbols from the global namespace, which a
Python extension module does not join by default.
"""
import os
import sys

_flags = sys.getdlopenflags()
sys.setdlopenflags(_flags | os.RTLD_GLOBAL)
try:
    from horo import _core  # noqa: E402
finally:
    sys.setdlopenflags(_flags)

HoroError = _core.HoroError
