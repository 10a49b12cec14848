"""The C++ unit tests (csrc/tests/, GoogleTest): configures the optional CMake target
(HORO_BUILD_TESTS), builds only `horo_unit_tests` in build/cpp-tests/ (kept between runs, so a
rebuild is incremental), and runs them under ctest. Skips, saying why, without GoogleTest
(Debian's libgtest-dev, which scripts/setup.sh installs where it can).
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import REPO_ROOT

pytestmark = pytest.mark.fast

BUILD = REPO_ROOT / "build" / "cpp-tests"


def run(cmd, timeout):
    proc = subprocess.run(cmd, cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


def gtest_found():
    return any(Path(p).exists() for p in ["/usr/include/gtest/gtest.h", "/usr/local/include/gtest/gtest.h"])


@pytest.mark.timeout(600)
def test_cpp_unit_tests_pass_under_ctest():
    cmake, ctest = shutil.which("cmake"), shutil.which("ctest")
    if not (cmake and ctest):
        pytest.skip("no cmake/ctest on PATH (scripts/setup.sh installs CMake)")
    if not gtest_found():
        pytest.skip("GoogleTest is not installed (apt-get install libgtest-dev; scripts/setup.sh does it as root)")
    import pybind11  # the top-level CMakeLists.txt finds it even though these tests do not use it

    run([cmake, "-S", str(REPO_ROOT), "-B", str(BUILD), "-DHORO_BUILD_TESTS=ON",
         f"-Dpybind11_DIR={pybind11.get_cmake_dir()}", f"-DPython_EXECUTABLE={sys.executable}"], timeout=300)
    run([cmake, "--build", str(BUILD), "--target", "horo_unit_tests", "-j", str(os.cpu_count() or 2)], timeout=600)
    out = run([ctest, "--test-dir", str(BUILD), "--output-on-failure", "--timeout", "120"], timeout=300)
    summary = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", out)
    assert summary, out[-4000:]
    total = int(summary.group(3))
    # Every suite registered: a test file dropped from the build would shrink this silently.
    for suite in ["ResponseCache.", "FusionPlan.", "WireMessages.", "TunablesTable.", "Environment.", "Controller.",
                  "ShmPolicy.", "ShmPathChoice.", "CollectiveShapes."]:
        assert suite in out, f"no {suite}* test ran:\n{out[-4000:]}"
    assert total >= 30 and summary.group(2) == "0", out[-4000:]
