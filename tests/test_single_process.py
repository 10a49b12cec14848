"""horo in one plain process, started without mpirun: a world of size 1.

Each scenario runs in a fresh interpreter (MPI can be initialised only once per
process, and the pytest process itself must stay MPI-free).
"""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from launcher import REPO_ROOT, mpi_env

PRELUDE = textwrap.dedent(
    """
    import numpy as np
    import ml_dtypes
    import horo

    DTYPES = [np.uint8, np.int8, np.int32, np.int64, np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
    OPS = ["Sum", "Average", "Min", "Max", "Product"]

    def expect(exc, fn, *words):
        try:
            fn()
        except exc as e:
            msg = str(e)
            for w in words:
                assert w.lower() in msg.lower(), f"{exc.__name__} message lacks {w!r}: {msg}"
            return e
        except Exception as e:
            raise AssertionError(f"expected {exc.__name__}, got {type(e).__name__}: {e}")
        raise AssertionError(f"expected {exc.__name__}, nothing was raised")
    """
)


def run_python(body, env=None, timeout=90):
    """Run PRELUDE + body in a fresh interpreter (no mpirun); fail with its output."""
    code = PRELUDE + textwrap.dedent(body) + "\nprint('SCRIPT-OK')\n"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            cwd=str(REPO_ROOT),
            env=mpi_env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"single-process script hung (>{timeout}s)\n{e.stdout or ''}{e.stderr or ''}", pytrace=False)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 or "SCRIPT-OK" not in proc.stdout:
        pytest.fail(f"single-process script failed (rc={proc.returncode}):\n{out[-12000:]}", pytrace=False)
    return out


@pytest.mark.timeout(120)
def test_op_constants_have_horovods_values():
    run_python(
        """
        assert (horo.Average, horo.Sum, horo.Min, horo.Max, horo.Product) == (0, 1, 3, 4, 5)
        assert issubclass(horo.HoroError, RuntimeError)
        """
    )


@pytest.mark.timeout(120)
def test_build_queries_of_horovods_intel_build_answer_before_init():
    # Horovod 0.28's Intel build (intel-optimization-for-horovod) and its test_torch.py ask sycl_built().
    run_python(
        """
        import horo.torch as thvd
        assert horo.sycl_built() is False and thvd.sycl_built() is False
        assert not horo.is_initialized()
        """
    )


@pytest.mark.timeout(120)
def test_calls_before_init_raise_value_error():
    run_python(
        """
        assert horo.is_initialized() is False
        x = np.ones(4, np.float32)
        calls = {
            "size": horo.size, "rank": horo.rank, "local_size": horo.local_size,
            "local_rank": horo.local_rank, "cross_size": horo.cross_size, "cross_rank": horo.cross_rank,
            "allreduce": lambda: horo.allreduce(x),
            "allreduce_": lambda: horo.allreduce_(x),
            "allreduce_async": lambda: horo.allreduce_async(x),
            "allreduce_async_": lambda: horo.allreduce_async_(x),
            "grouped_allreduce": lambda: horo.grouped_allreduce([x]),
            "grouped_allreduce_": lambda: horo.grouped_allreduce_([x]),
            "grouped_allreduce_async": lambda: horo.grouped_allreduce_async([x]),
            "grouped_allreduce_async_": lambda: horo.grouped_allreduce_async_([x]),
        }
        for what, fn in calls.items():
            try:
                expect(ValueError, fn, "not been initialized")
            except AssertionError as e:
                raise AssertionError(f"{what}() before init: {e}")
        assert np.array_equal(x, np.ones(4, np.float32)), "a rejected in-place call modified its input"
        assert "process_set_id=0" in repr(horo.global_process_set)   # printable before init
        assert horo.is_initialized() is False
        """
    )


@pytest.mark.timeout(120)
def test_single_process_without_mpirun_is_a_world_of_size_one():
    run_python(
        """
        horo.init()
        assert horo.is_initialized() is True
        assert (horo.size(), horo.rank()) == (1, 0)
        assert (horo.local_size(), horo.local_rank()) == (1, 0)
        assert (horo.cross_size(), horo.cross_rank()) == (1, 0)
        assert isinstance(horo.mpi_threads_supported(), bool)
        rng = np.random.default_rng(0)
        for dt in DTYPES:
            for shape in [(), (0,), (1,), (7,), (3, 0), (4, 5)]:
                x = (rng.uniform(-50, 50, size=shape) if np.dtype(dt).kind not in "u"
                     else rng.uniform(0, 100, size=shape)).astype(dt)
                for op in OPS:
                    what = f"{op} {np.dtype(dt)} {shape}"
                    out = horo.allreduce(x, op=getattr(horo, op))
                    assert isinstance(out, np.ndarray), what
                    assert out.dtype == x.dtype and out.shape == x.shape, what
                    assert out.tobytes() == x.tobytes(), f"{what}: a world of one must return its input"
                    y = x.copy()
                    assert horo.allreduce_(y, op=getattr(horo, op)) is y, what
                    assert y.tobytes() == x.tobytes(), what
                    h = horo.allreduce_async(x, op=getattr(horo, op))
                    assert horo.synchronize(h).tobytes() == x.tobytes(), what
                    y = x.copy()
                    h = horo.allreduce_async_(y, name=f"inplace.{what}", op=getattr(horo, op))
                    horo.synchronize(h)
                    assert y.tobytes() == x.tobytes(), what
        # default op (Average) of one rank, and scale factors
        x = np.arange(10, dtype=np.float32)
        assert np.array_equal(horo.allreduce(x), x)
        assert np.array_equal(horo.allreduce(x, op=horo.Sum, prescale_factor=0.5, postscale_factor=4.0), x * 2)
        xi = np.arange(10, dtype=np.int32)
        expected = np.trunc(np.trunc(xi * 0.5) * 3.0).astype(np.int32)  # float64, truncated at each step (Horovod)
        assert np.array_equal(horo.allreduce(xi, op=horo.Sum, prescale_factor=0.5, postscale_factor=3.0), expected)
        # grouped
        xs = [np.arange(n, dtype=np.float64) for n in (0, 1, 5)]
        outs = horo.grouped_allreduce(xs, op=horo.Sum)
        assert all(np.array_equal(a, b) for a, b in zip(outs, xs))
        handles = horo.grouped_allreduce_async(xs, op=horo.Max)
        assert all(np.array_equal(horo.synchronize(h), b) for h, b in zip(handles, xs))
        # poll eventually reports completion
        import time
        h = horo.allreduce_async(np.ones(1000, np.float32), name="polled")
        deadline = time.monotonic() + 30
        while not horo.poll(h):
            assert time.monotonic() < deadline, "poll() never returned True"
            time.sleep(0.001)
        assert np.array_equal(horo.synchronize(h), np.ones(1000, np.float32))
        horo.shutdown()
        assert horo.is_initialized() is False
        """
    )


@pytest.mark.timeout(120)
def test_a_world_of_one_leaves_no_shared_memory_file():
    """Open MPI 5 without a launcher never removes its shared-memory BTL's file; horo.init() does."""
    out = run_python(
        """
        horo.init()
        with open("/proc/self/maps") as maps:
            mapped = {line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6}
        for path in sorted(p for p in mapped if p.startswith("/dev/shm/") and "_segment." in p):
            print("SEGMENT", path.removesuffix(" (deleted)"))
        horo.shutdown()
        """
    )
    segments = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("SEGMENT ")]
    if not segments:
        pytest.skip("this MPI maps no shared-memory BTL file in a world of one")
    left = [p for p in segments if os.path.exists(p)]
    for path in left:
        os.unlink(path)
    assert not left, f"left in /dev/shm: {left}"


@pytest.mark.timeout(120)
def test_calls_after_shutdown_raise_value_error():
    run_python(
        """
        horo.init()
        horo.allreduce(np.ones(3, np.float32))
        horo.shutdown()
        assert horo.is_initialized() is False
        x = np.ones(3, np.float32)
        for what, fn in {
            "allreduce": lambda: horo.allreduce(x),
            "allreduce_": lambda: horo.allreduce_(x),
            "allreduce_async": lambda: horo.allreduce_async(x),
            "grouped_allreduce": lambda: horo.grouped_allreduce([x]),
            "size": horo.size,
            "rank": horo.rank,
        }.items():
            try:
                expect(ValueError, fn, "not been initialized")
            except AssertionError as e:
                raise AssertionError(f"{what}() after shutdown: {e}")
        """
    )


@pytest.mark.timeout(120)
def test_a_world_of_one_runs_on_the_caller_and_sleeps_when_idle():
    # No peer to poll for: blocking calls run on the caller's thread (a hand-over to the
    # background thread and back cost more than the collective), and an idle background
    # thread sleeps (it used to poll every 1 ms cycle: 870 wake-ups and 6.5% of a core a second).
    run_python(
        """
        import sys, time

        sys.path.insert(0, "tests/mpi")  # the script runs in the repository root
        from engine_thread import engine_thread_activity

        def engine_thread():
            return engine_thread_activity()[0]  # voluntary and involuntary switches

        horo.init()
        x = np.arange(1024, dtype=np.float32)
        switches = engine_thread()
        for _ in range(2000):
            assert np.array_equal(horo.allreduce(x, name="one", op=horo.Sum), x)
        woken = engine_thread() - switches
        assert woken <= 100, f"the background thread switched in {woken} times over 2000 blocking calls"
        # Async calls still reach the background thread.
        handles = [horo.allreduce_async(x, name=f"async.{i}", op=horo.Sum) for i in range(50)]
        assert all(np.array_equal(horo.synchronize(h), x) for h in handles)
        switches = engine_thread()
        time.sleep(1.0)
        woken = engine_thread() - switches
        assert woken <= 5, f"idle for 1 s, the background thread woke {woken} times"
        horo.shutdown()
        """
    )


@pytest.mark.timeout(120)
def test_bad_input_errors_in_a_world_of_one():
    run_python(
        """
        horo.init()
        for dt in (np.complex64, np.uint16):
            expect(TypeError, lambda: horo.allreduce(np.ones(3, dt), name="t.bad"), "t.bad", np.dtype(dt).name)
        expect(ValueError, lambda: horo.allreduce(np.ones(3, np.bool_), name="t.bool"), "t.bool", "bool")
        expect(TypeError, lambda: horo.allreduce(np.array([1, "x"], dtype=object), name="t.obj"), "t.obj", "object")
        expect(ValueError, lambda: horo.allreduce(np.ones(8, np.float32)[::2], name="t.strided"),
               "t.strided", "contiguous")
        expect(ValueError, lambda: horo.allreduce_(np.ones((3, 4), np.float64).T, name="t.T"), "t.T", "contiguous")
        # The core's own entry: a collective that writes the caller's buffer, given none, raises (never writes to 0).
        from horo._native import _core
        codes, x = _core.collective_codes, np.ones(4, np.float32)
        for coll in ("allreduce", "broadcast", "reduce"):
            expect(ValueError, lambda: _core.run(codes[coll], "t.none", x, None, 6, 1, 1.0, 1.0, 0, [], 0),
                   coll, "t.none", "no output buffer")
        # still works afterwards, and the rejected names are free
        assert np.array_equal(horo.allreduce(np.ones(3, np.float32), name="t.bad", op=horo.Sum), np.ones(3))
        assert np.array_equal(horo.allreduce(x, name="t.none", op=horo.Sum), x)
        horo.shutdown()
        """
    )


@pytest.mark.timeout(120)
def test_init_with_mpi4py_comm_in_a_world_of_one_leaves_mpi_usable():
    run_python(
        """
        from mpi4py import MPI
        horo.init(comm=MPI.COMM_WORLD)
        assert (horo.size(), horo.rank()) == (1, 0)
        assert np.array_equal(horo.allreduce(np.arange(4.0), op=horo.Sum), np.arange(4.0))
        horo.shutdown()
        assert not MPI.Is_finalized(), "horo.shutdown() finalised the MPI that mpi4py initialised"
        assert MPI.COMM_WORLD.allreduce(3) == 3
        """
    )


@pytest.mark.timeout(200)
@pytest.mark.parametrize("suite", ["ranks_allreduce.py", "ranks_async_order.py", "ranks_errors.py"])
def test_rank_suites_pass_in_one_process_without_mpirun(ranks, suite):
    ranks(None, suite, timeout=180)


@pytest.mark.timeout(60)
def test_core_exports_only_its_python_entry_point():
    # _core is loaded RTLD_GLOBAL (horo/_native.py): anything else it exported, a statically linked
    # libstdc++ above all, would interpose with other extensions' libraries (CMakeLists.txt).
    if sys.platform != "linux" or shutil.which("nm") is None:
        pytest.skip("needs Linux and binutils' nm")
    core = next((REPO_ROOT / "horo").glob("_core*.so"), None)
    if core is None:
        pytest.skip("horo is installed, not built in place")
    out = subprocess.run(["nm", "-D", "--defined-only", str(core)], capture_output=True, text=True, check=True)
    assert [line.split()[-1] for line in out.stdout.splitlines()] == ["PyInit__core"], out.stdout[:2000]
