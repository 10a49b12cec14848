"""The native TensorFlow op library: built from ops/horo_ops.cc against the TensorFlow
that is installed, at first import, cached, loaded, and connected to horo's core.

The build is keyed by everything that changes the binary (TensorFlow's version and
compile/link flags, which carry its C++ ABI, the compiler, the sources and the C
interface version) and cached under $HORO_CACHE_DIR or ~/.cache/horo/, so it
happens once per TensorFlow install; a file lock lets one rank build while the
others wait. Where it cannot be built (HORO_TF_NATIVE=0, no compiler, a failed
compile), `library()` returns None after one logging warning, and horo.tensorflow
keeps its blocking tf.numpy_function ops.
"""
import ctypes
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tensorflow as tf

from horo._native import _core

logger = logging.getLogger("horo.tensorflow")

_HERE = Path(__file__).resolve().parent
SOURCE = _HERE / "ops" / "horo_ops.cc"
INCLUDE = Path(_core.__file__).resolve().parent / "include"
LOST = ("collectives block a TensorFlow thread each (a graph whose ranks order independent collectives "
        "differently can deadlock with few inter-op threads), models using them cannot be exported with "
        "tf.saved_model, and every call holds the GIL")

_state = {}  # "library", "path", "reason": filled by the first library() call


def cache_dir():
    root = os.environ.get("HORO_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "horo")
    return Path(root) / "tf_ops"


def compiler():
    for candidate in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def _compiler_version(cxx):
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def build_key(cxx, extra=""):
    """Changes whenever the built library would: TF version and flags (ABI), compiler, sources, C API version."""
    h = hashlib.sha256()
    for part in (tf.__version__, tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags(),
                 _compiler_version(cxx), _core.c_api_version, sys.implementation.cache_tag, extra):
        h.update(repr(part).encode())
    for source in (SOURCE, INCLUDE / "horo_c_api.h"):
        h.update(source.read_bytes())
    return h.hexdigest()[:16]


def library_path(cxx, key):
    return cache_dir() / f"horo_tf_ops-tf{tf.__version__}-{key}.so"


def build(cxx, target):
    """Compiles the op library to `target` (atomically: a loaded old file is never overwritten)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    cmd = [cxx, "-shared", "-fPIC", "-O2", "-std=c++17", str(SOURCE), f"-I{INCLUDE}",
           *tf.sysconfig.get_compile_flags(), "-o", staging, *tf.sysconfig.get_link_flags()]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}\n{proc.stderr[-3000:]}")
        os.replace(staging, target)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)


def ensure_built(key_extra=""):
    """The cached library's path, building it first if needed (one process at a time)."""
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (set CXX, or install g++)")
    target = library_path(cxx, build_key(cxx, key_extra))
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # ranks on one host: the first builds, the rest find it built
        if not target.exists():
            logger.info("building horo's TensorFlow op library into %s", target)
            build(cxx, target)
    return target


def _connect(path):
    """Hands horo's C function table to the loaded library (same file, so dlopen shares its globals)."""
    setter = ctypes.CDLL(str(path)).horo_tf_set_c_api
    setter.argtypes = [ctypes.c_void_p, ctypes.c_int]
    if setter(_core.c_api_address(), _core.c_api_version) != 0:
        raise RuntimeError(f"{path} speaks another version of horo's C interface than this core "
                           f"({_core.c_api_version})")


def library():
    """The loaded op module, or None when horo.tensorflow must fall back to numpy_function ops."""
    if "library" in _state:
        return _state["library"]
    lib, path, reason = None, None, None
    if os.environ.get("HORO_TF_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
        reason = "HORO_TF_NATIVE=0"
    else:
        try:
            path = ensure_built()
            lib = tf.load_op_library(str(path))
            _connect(path)
        except Exception as e:  # noqa: BLE001 - any failure means the fallback, said once below
            lib, reason = None, f"{type(e).__name__}: {e}"
    if lib is None:
        logger.warning("horo.tensorflow: native TensorFlow ops unavailable (%s); using tf.numpy_function "
                       "collectives instead, so %s", reason.strip().splitlines()[0] if reason else "?", LOST)
    _state.update(library=lib, path=path, reason=reason)
    return lib


def describe():
    """One line for `horo-run --check-build`: which path TensorFlow collectives take."""
    library()
    if _state["library"] is not None:
        return f"native AsyncOpKernels ({_state['path']})"
    return f"tf.numpy_function fallback ({_state['reason']})"
