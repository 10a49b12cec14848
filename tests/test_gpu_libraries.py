"""horo's GPU path against the real NCCL and CUDA runtime libraries, on any machine.

The nvidia-nccl-cu13 / nvidia-cuda-runtime / nvidia-cuda-crt wheels (the `gpu-test`
extra; scripts/setup.sh installs them) load and answer on a machine without a GPU:
ncclGetVersion works, cudaGetDeviceCount reports why there is no device. So the
loader, the symbol table and the declared prototypes are checked here, in CI, not
at a user's first GPU run. Each scenario runs in a fresh interpreter: a library is
looked up once per process.
"""
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import REPO_ROOT, mpi_env
from test_single_process import run_python


def _wheel_version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvidia_roots():
    spec = importlib.util.find_spec("nvidia")
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def _find(relative):
    for root in _nvidia_roots():
        if (root / relative).exists():
            return root / relative
    return None


NCCL_WHEEL = _wheel_version("nvidia-nccl-cu13") or _wheel_version("nvidia-nccl-cu12")
needs_wheels = pytest.mark.skipif(
    NCCL_WHEEL is None or _find("cu13/lib/libcudart.so.13") is None,
    reason="the gpu-test wheels (nvidia-nccl-cu13, nvidia-cuda-runtime) are not installed: pip install -e .[gpu-test]",
)


def gpu_info(env=None):
    out = run_python("import json; print('INFO=' + json.dumps(horo.gpu_info()._asdict()))", env=env)
    line = next(l for l in out.splitlines() if l.startswith("INFO="))
    return json.loads(line[len("INFO="):])


@needs_wheels
@pytest.mark.timeout(120)
def test_nccl_version_is_the_installed_wheels():
    info = gpu_info({"HORO_NCCL_LIB": None})
    assert info["nccl_version"] == NCCL_WHEEL, info
    assert info["nccl_reason"] is None
    assert info["nccl_path"] == str(_find("nccl/lib/libnccl.so.2")), info


@needs_wheels
@pytest.mark.timeout(120)
def test_every_symbol_horo_resolves_exists_in_the_wheel_libraries():
    # Looked up with ctypes, independently of horo's loader: a misspelt or
    # too-new symbol in csrc/gpu/*_api.h fails here.
    run_python(
        f"""
        import ctypes
        symbols = horo._native._core.gpu_symbols()
        libraries = {{"nccl": ctypes.CDLL({str(_find("nccl/lib/libnccl.so.2"))!r}),
                      "cudart": ctypes.CDLL({str(_find("cu13/lib/libcudart.so.13"))!r})}}
        assert len(symbols["nccl"]) >= 15 and len(symbols["cudart"]) >= 15, symbols
        missing = [(lib, s) for lib, names in symbols.items() for s in names if not hasattr(libraries[lib], s)]
        assert not missing, missing
        """
    )


@needs_wheels
@pytest.mark.timeout(180)
def test_declarations_match_the_wheel_headers(tmp_path):
    """Compiles tests/gpu/check_prototypes.cc: horo's declarations beside the real nccl.h and
    cuda_runtime_api.h, static_asserting every signature, enum value and size."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    nccl_h, cuda_h = _find("nccl/include/nccl.h"), _find("cu13/include/cuda_runtime_api.h")
    if _find("cu13/include/crt/host_defines.h") is None:
        pytest.skip("nvidia-cuda-crt (the CUDA runtime's crt/ headers) is not installed")
    # nccl.h includes the fp16/bf16/fp8 device-number headers, which need CCCL's <nv/target>;
    # no host prototype uses those types, so empty stand-ins keep the check to what horo calls.
    for name in ("cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"):
        (tmp_path / name).write_text("#pragma once\n")
    cmd = [compiler, "-std=c++17", "-fsyntax-only", "-Wall", "-Werror", f"-I{tmp_path}", f"-I{nccl_h.parent}",
           f"-I{cuda_h.parent}", f"-I{REPO_ROOT / 'csrc'}", str(REPO_ROOT / "tests/gpu/check_prototypes.cc")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-6000:]


@needs_wheels
@pytest.mark.timeout(120)
def test_nccl_built_and_cuda_built_answer_yes_where_the_wheels_load():
    # Horovod's answer shape: NCCL_VERSION_CODE (an int) for nccl_built, a bool for cuda_built.
    major, minor, patch = (int(p) for p in NCCL_WHEEL.split("."))
    code = major * 10000 + minor * 100 + patch
    run_python(
        f"""
        import horo.torch as thvd
        assert horo.nccl_built() == {code} and horo.cuda_built() is True, (horo.nccl_built(), horo.cuda_built())
        assert thvd.nccl_built() == {code} and thvd.cuda_built() is True
        """,
        env={"HORO_NCCL_LIB": None, "HORO_CUDART_LIB": None},
    )


@pytest.mark.timeout(120)
def test_nccl_built_is_zero_with_the_reason_when_nccl_cannot_load():
    run_python(
        """
        assert horo.nccl_built() == 0, horo.nccl_built()
        assert horo.nccl_version() is None
        reason = horo.gpu_info().nccl_reason
        assert "HORO_NCCL_LIB: /missing/path/libnccl.so.2" in reason and "No such file" in reason, reason
        """,
        env={"HORO_NCCL_LIB": "/missing/path/libnccl.so.2"},
    )


@pytest.mark.timeout(120)
def test_cuda_built_is_false_with_the_reason_when_the_runtime_cannot_load():
    run_python(
        """
        assert horo.cuda_built() is False and horo.nccl_built() == 0
        assert horo.gpu_available() is False
        reason = horo.gpu_info().cuda_reason
        assert "HORO_CUDART_LIB: /missing/libcudart.so" in reason, reason
        """,
        env={"HORO_CUDART_LIB": "/missing/libcudart.so"},
    )


@pytest.mark.timeout(120)
def test_missing_nccl_lib_names_what_was_tried():
    info = gpu_info({"HORO_NCCL_LIB": "/missing/path/libnccl.so.2"})
    assert info["nccl_version"] is None
    reason = info["nccl_reason"]
    assert "NCCL" in reason and "HORO_NCCL_LIB: /missing/path/libnccl.so.2" in reason, reason
    assert "No such file" in reason, reason
    assert "unset it to search the pip wheels and the system loader path" in reason, reason


@pytest.mark.timeout(120)
def test_search_order_is_override_then_loaded_then_wheels_then_system():
    info = gpu_info({"HORO_NCCL_LIB": None, "HORO_CUDART_LIB": None})
    order = info["nccl_search_order"]
    assert order[0] == "HORO_NCCL_LIB: (unset)", order
    assert order[1] == "already loaded in this process: libnccl.so.2", order
    assert order[-1] == "system loader path: libnccl.so.2", order
    wheel = _find("nccl/lib/libnccl.so.2")
    if wheel is not None:
        assert order[2:-1] == [f"pip wheel: {wheel}"], order
    cudart = info["cudart_search_order"]
    assert cudart[0] == "HORO_CUDART_LIB: (unset)" and cudart[-1] == "system loader path: libcudart.so", cudart


@pytest.mark.timeout(120)
def test_gpu_info_without_a_device_says_why():
    info = gpu_info()
    if info["device_count"] > 0:
        pytest.skip(f"this machine has {info['device_count']} CUDA device(s)")
    assert info["cuda_reason"], info
    run_python("assert horo.gpu_available() is False")


@pytest.mark.timeout(120)
def test_cuda_array_without_a_device_raises_naming_the_tensor():
    if gpu_info()["device_count"] > 0:
        pytest.skip("a CUDA device is visible: GPU arrays are served here (tests/test_gpu.py)")
    run_python(
        """
        class DeviceArray:  # what CuPy / Numba hand over: __cuda_array_interface__ (v3)
            __cuda_array_interface__ = {"shape": (4, 2), "typestr": "<f4", "data": (0x7F0000000000, False),
                                        "version": 3, "strides": None, "stream": None}

        horo.init()
        x = DeviceArray()
        for call in (lambda: horo.allreduce(x, name="grad.w"), lambda: horo.allreduce_(x, name="grad.w"),
                     lambda: horo.broadcast(x, 0, name="grad.w"), lambda: horo.allgather(x, name="grad.w"),
                     lambda: horo.reducescatter(x, name="grad.w"), lambda: horo.alltoall(x, name="grad.w")):
            expect(horo.HoroError, call, "'grad.w'", "CUDA tensor", "cannot use a GPU here")
        # Nothing was left half-submitted: the same name works for a host array at once.
        assert horo.allreduce(np.ones(3), name="grad.w", op=horo.Sum).tolist() == [1, 1, 1]
        horo.shutdown()
        """
    )


@needs_wheels
@pytest.mark.timeout(120)
def test_device_allocation_without_a_device_raises_saying_why():
    # device_memory.cc asks for CUDA's stream-ordered allocator first (cudaDeviceGetAttribute,
    # cudaMallocAsync on the caller's stream); with no device (or driver) it ends in a clear CUDA error, not a crash.
    if gpu_info({"HORO_NCCL_LIB": None, "HORO_CUDART_LIB": None})["device_count"] > 0:
        pytest.skip("a CUDA device is visible: device allocations are exercised in tests/test_gpu.py")
    run_python(
        """
        expect(horo.HoroError, lambda: horo._native._core.device_empty(0, 1024, 0), "failed", "CUDA error")
        """,
        env={"HORO_NCCL_LIB": None, "HORO_CUDART_LIB": None},
    )


@pytest.mark.timeout(120)
def test_gpu_transport_setting_is_checked_at_init():
    run_python(
        """
        expect(horo.HoroError, horo.init, "HORO_GPU_TRANSPORT", "nccl, mpi or auto")
        """,
        env={"HORO_GPU_TRANSPORT": "gloo"},
    )


@needs_wheels
@pytest.mark.timeout(120)
def test_check_build_lists_nccl_with_its_version():
    proc = subprocess.run([sys.executable, "-m", "horo.run", "--check-build"], cwd=str(REPO_ROOT),
                          env=mpi_env({"HORO_NCCL_LIB": None}), capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr
    nccl_line = next(l for l in proc.stdout.splitlines() if "] NCCL" in l)
    assert nccl_line.strip().startswith("[X]") and NCCL_WHEEL in nccl_line, proc.stdout


@pytest.mark.timeout(240)
@pytest.mark.parametrize("np_", [2, 3])
def test_a_step_failing_on_one_rank_raises_on_every_rank_naming_it(ranks, np_):
    # gpu/collective_outcome.h over real MPI ranks: what NCCL communicator creation and the
    # in-flight error check rely on to end every rank's wait together.
    ranks(np_, "ranks_gpu_outcomes.py", timeout=200)


@pytest.mark.timeout(60)
def test_nccl_wait_decision_aborts_on_an_error_or_past_the_deadline():
    run_python(
        """
        verdict, success, in_progress, system_error, remote_error = (
            horo._native._core._nccl_wait_verdict_for_test, 0, 7, 2, 6)
        assert verdict(True, success, 0.1, 600) == "done"
        assert verdict(False, in_progress, 0.1, 600) == "wait"
        assert verdict(False, success, 599.9, 600) == "wait"
        assert verdict(False, success, 600.0, 600) == "timed out"
        assert verdict(False, in_progress, 1e6, 0) == "wait"          # 0: no deadline
        assert verdict(False, remote_error, 0.1, 600) == "failed"     # a peer failed: abort now
        assert verdict(True, system_error, 0.1, 600) == "failed"      # finished on a failed communicator
        """
    )
