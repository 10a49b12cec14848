"""`horo-run --check-build`: what this installation can do, as a checklist.

Frameworks are looked up without importing them (find_spec); the transports
horo loads at run time (NCCL, the CUDA runtime) are checked the same way the
core finds them, by dlopen; the collectives are whatever the package exports.
"""
import ctypes
import ctypes.util
import importlib.metadata
import importlib.util
import os

from horo.run import mpi_flavor

# Looking up horo.tensorflow.keras imports TensorFlow, whose start-up chatter would bury the checklist.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FRAMEWORKS = (
    ("PyTorch", "torch", "horo.torch"),
    ("TensorFlow", "tensorflow", "horo.tensorflow"),
    ("Keras", "keras", "horo.tensorflow.keras"),
    ("CuPy", "cupy", None),
    ("NumPy", "numpy", None),
)

COLLECTIVES = (
    "allreduce", "grouped_allreduce", "allgather", "broadcast", "alltoall", "reducescatter",
    "gather", "scatter", "reduce", "barrier", "join",
)

# (label, library name for find_library, sonames to try when find_library finds nothing)
RUNTIME_LIBRARIES = (
    ("NCCL", "nccl", ("libnccl.so.2", "libnccl.so")),
    ("CUDA runtime", "cudart", ("libcudart.so.12", "libcudart.so.11.0", "libcudart.so")),
)


def _mark(ok):
    return "[X]" if ok else "[ ]"


def _find_spec(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that fails to import
        return False


def _distribution_version(module):
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return None


def framework_rows():
    rows = []
    for label, module, plugin in FRAMEWORKS:
        found = _find_spec(module)
        notes = []
        if found:
            version = _distribution_version(module)
            notes.append(f"{module} {version}" if version else module)
            if plugin:
                notes.append(f"{plugin} {'available' if _find_spec(plugin) else 'not installed'}")
            if module == "tensorflow" and _find_spec(plugin):
                notes.append(f"collectives: {tensorflow_ops_path()}")
        rows.append((found, label, "; ".join(notes)))
    return rows


def tensorflow_ops_path():
    """Native AsyncOpKernels or the numpy_function fallback (imports TensorFlow; may build the op library)."""
    try:
        from horo.tensorflow import native

        return native.describe()
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"unknown ({type(e).__name__}: {e})"


def dlopen_library(name, sonames):
    """The library's path or soname if it can be loaded now, else None."""
    for candidate in filter(None, (ctypes.util.find_library(name), *sonames)):
        try:
            ctypes.CDLL(candidate)
        except OSError:
            continue
        return candidate
    return None


def _import_horo():
    try:
        import horo
        import horo._native  # the compiled core, should horo/__init__ ever load it lazily

        return horo, None
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return None, f"{type(e).__name__}: {e}"


def mpi_row(horo, mpirun):
    """MPI is horo's own transport: available when the core (built on it) loads."""
    core = getattr(getattr(horo, "_native", None), "_core", None)
    version = None
    for attr in ("mpi_library_version", "mpi_version"):
        fn = getattr(core, attr, None)
        if callable(fn):
            try:
                version = mpi_flavor.first_line(str(fn()))
            except Exception:  # noqa: BLE001
                version = None
            break
    if version is None and mpirun:
        version = mpi_flavor.first_line(mpi_flavor.version_text(mpirun))
    notes = [version or "version unknown", f"launcher {mpirun}" if mpirun else "no mpirun found"]
    return (horo is not None, "MPI", "; ".join(notes))


def gpu_rows(info):
    """NCCL and CUDA as the core finds them at run time (its own dlopen search), with the reason when not."""
    mode = os.environ.get("HORO_GPU_TRANSPORT", "auto")

    def first_line(text):
        return (text or "").splitlines()[0] if text else ""

    nccl_ok = info.nccl_version is not None
    nccl_note = f"{info.nccl_version} ({info.nccl_path})" if nccl_ok else first_line(info.nccl_reason)
    cuda_ok = info.device_count > 0
    cuda_note = (f"{info.device_count} device(s), runtime {info.cudart_path}" if cuda_ok
                 else f"no GPU: {first_line(info.cuda_reason)}")
    serving = "NCCL, else MPI staging" if mode == "auto" else {"nccl": "NCCL", "mpi": "MPI staging"}.get(mode, mode)
    return [
        (nccl_ok, "NCCL", nccl_note),
        (cuda_ok, "CUDA", cuda_note),
        (cuda_ok, "GPU tensors", f"HORO_GPU_TRANSPORT={mode}: {serving}" if cuda_ok else "not served (no GPU)"),
    ]


def report(mpirun=None):
    """The checklist as text."""
    horo, error = _import_horo()
    version = getattr(horo, "__version__", None) or _distribution_version("horo") or "unknown"
    lines = [f"horo v{version}:", ""]
    if error:
        lines += [f"    the compiled core does not load ({error})", ""]

    lines.append("Available Frameworks:")
    lines += _rows(framework_rows())

    lines += ["", "Available Transports:"]
    transports = [mpi_row(horo, mpirun)]
    if horo is not None and hasattr(horo, "gpu_info"):
        transports += gpu_rows(horo.gpu_info())
    else:
        for label, name, sonames in RUNTIME_LIBRARIES:
            found = dlopen_library(name, sonames)
            transports.append((found is not None, label, found or f"lib{name}.so not found"))
    lines += _rows(transports)

    lines += ["", "Available Collectives:"]
    lines += _rows([(horo is not None and hasattr(horo, op), op, "") for op in COLLECTIVES])
    return "\n".join(lines) + "\n"


def _rows(rows):
    width = max(len(label) for _, label, _ in rows)
    return [f"    {_mark(ok)} {label:<{width}}  {note}".rstrip() for ok, label, note in rows]
