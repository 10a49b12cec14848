"""Shutdown: pending handles fail instead of blocking; later calls raise ValueError.

Runs inside each MPI rank. Each test initialises and shuts horo down itself, so
run ONE test per mpirun launch (the driver selects it with -k):
    mpirun -np 2 --oversubscribe python -m pytest -q -x tests/mpi/ranks_shutdown.py -k another_rank
"""
import threading
import time

import numpy as np
import pytest

from mpi4py import MPI

from horo_reference import check_result, make_rank_inputs
from rank_helpers import expect_raise_on_every_rank, gather_and_compare

_state = {"used": False}


@pytest.fixture
def fresh_horo():
    """horo initialised for this one test; a second such test in the same process is skipped."""
    if _state["used"]:
        pytest.skip("horo is shut down in this process already: run one test of this file per launch (-k)")
    _state["used"] = True
    import horo

    horo.init()
    yield horo
    if horo.is_initialized():
        horo.shutdown()


needs_two_ranks = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() < 2, reason="needs at least two ranks")


def _warm_up(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    inputs = make_rank_inputs("warmup", "float32", (5,), "Sum", "exact", size)
    check_result(hvd.allreduce(inputs[rank], op=hvd.Sum), inputs, "Sum", True, what="warm-up")


def _expect_calls_after_shutdown_raise_value_error(hvd, comm):
    x = np.ones(3, np.float32)
    calls = {
        "allreduce": lambda: hvd.allreduce(x, op=hvd.Sum),
        "allreduce_": lambda: hvd.allreduce_(x.copy(), op=hvd.Sum),
        "allreduce_async": lambda: hvd.allreduce_async(x, op=hvd.Sum),
        "allreduce_async_": lambda: hvd.allreduce_async_(x.copy(), op=hvd.Sum),
        "grouped_allreduce": lambda: hvd.grouped_allreduce([x], op=hvd.Sum),
        "grouped_allreduce_async": lambda: hvd.grouped_allreduce_async([x], op=hvd.Sum),
        "size": hvd.size,
        "rank": hvd.rank,
        "local_rank": hvd.local_rank,
    }
    for what, fn in calls.items():
        expect_raise_on_every_rank(comm, ValueError, fn, ("not been initialized",), what=f"{what} after shutdown")
    assert hvd.is_initialized() is False


@needs_two_ranks
def test_pending_handle_fails_when_another_rank_shuts_down(fresh_horo, comm):
    """All ranks but the last wait on a tensor nobody else submits; the last rank
    shuts down. The waiting synchronize() calls must raise HoroError, not block."""
    hvd = fresh_horo
    size, rank = hvd.size(), hvd.rank()
    _warm_up(hvd, comm)
    last = size - 1
    outcome = None
    if rank != last:
        handle = hvd.allreduce_async(np.ones(4, np.float32), name=f"orphan.{rank}", op=hvd.Sum)
        comm.Barrier()
        t0 = time.monotonic()
        try:
            hvd.synchronize(handle)
            outcome = "returned a result"
        except hvd.HoroError as e:
            outcome = "HoroError"
            print(f"rank {rank}: synchronize failed after {time.monotonic() - t0:.2f}s: {e}")
        except Exception as e:  # noqa: BLE001
            outcome = f"{type(e).__name__}: {e}"
        hvd.shutdown()
    else:
        comm.Barrier()
        hvd.shutdown()
    outcomes = comm.allgather(outcome)
    assert all(o == "HoroError" for r, o in enumerate(outcomes) if r != last), outcomes
    _expect_calls_after_shutdown_raise_value_error(hvd, comm)


@needs_two_ranks
def test_pending_handles_fail_at_shutdown_instead_of_blocking(fresh_horo, comm):
    """Every rank has tensors only it submitted; shutdown() must return, a thread
    blocked in synchronize() must get HoroError, and a later synchronize() must
    raise (not block)."""
    hvd = fresh_horo
    size, rank = hvd.size(), hvd.rank()
    _warm_up(hvd, comm)
    waiting = hvd.allreduce_async(np.ones(4, np.float32), name=f"orphan.thread.{rank}", op=hvd.Sum)
    later = hvd.allreduce_async(np.ones(4, np.float32), name=f"orphan.later.{rank}", op=hvd.Sum)
    box = {}

    def wait():
        try:
            hvd.synchronize(waiting)
            box["outcome"] = "returned a result"
        except hvd.HoroError:
            box["outcome"] = "HoroError"
        except Exception as e:  # noqa: BLE001
            box["outcome"] = f"{type(e).__name__}: {e}"

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    time.sleep(0.2)  # let the thread block in synchronize()
    comm.Barrier()
    hvd.shutdown()  # must return although handles are pending
    waiter.join(timeout=30)
    assert not waiter.is_alive(), "synchronize() in another thread still blocks 30 s after shutdown()"
    outcomes = comm.allgather(box.get("outcome"))
    assert all(o == "HoroError" for o in outcomes), f"blocked synchronize() per rank: {outcomes}"

    # A handle that was pending at shutdown: synchronize() must fail, not block. The
    # spec says the handle fails with HoroError; ValueError (horo is shut down) is
    # accepted too, as the spec also says calls after shutdown raise ValueError.
    expect_raise_on_every_rank(
        comm, (hvd.HoroError, ValueError), lambda: hvd.synchronize(later), (), what="synchronize after shutdown"
    )
    _expect_calls_after_shutdown_raise_value_error(hvd, comm)


def test_calls_after_shutdown_raise_value_error_on_every_rank(fresh_horo, comm):
    hvd = fresh_horo
    _warm_up(hvd, comm)
    assert hvd.is_initialized() is True
    hvd.shutdown()
    _expect_calls_after_shutdown_raise_value_error(hvd, comm)
    # horo did not initialise MPI here (mpi4py did), so MPI must still work
    assert not MPI.Is_finalized()
    gather_and_compare(comm, comm.allreduce(1), "mpi4py allreduce after horo.shutdown()")
