"""Timeline: named collectives under HORO_TIMELINE, then start_timeline/stop_timeline at run time.

Runs inside each MPI rank; each test initialises and shuts horo down itself (shutdown closes the
file), so run ONE test per launch (-k). The outer test (tests/test_timeline.py) reads the files
rank 0 wrote into HORO_TEST_TIMELINE_DIR.
"""
import os
import time
from pathlib import Path

import numpy as np

from mpi4py import MPI


def _out():
    return Path(os.environ["HORO_TEST_TIMELINE_DIR"])


def test_timeline_records_named_collectives():
    import horo

    horo.init()
    rank, size = horo.rank(), horo.size()
    for _ in range(3):  # the first step negotiates, later ones run from the response cache
        handles = [horo.allreduce_async(np.full(100 * (k + 1), rank, np.float32), name=f"grad.{k}", op=horo.Sum)
                   for k in range(4)]
        for h in handles:
            assert np.all(horo.synchronize(h) == size * (size - 1) / 2)
    assert np.array_equal(horo.broadcast(np.arange(10.0) * (rank + 1), root_rank=0, name="weights.bcast"),
                          np.arange(10.0))
    assert horo.allgather(np.ones((rank + 1, 3)), name="rows.gather").shape == (size * (size + 1) // 2, 3)
    if rank == 1:
        time.sleep(0.3)  # rank 0 waits for this one: WAIT_FOR_OTHER_RANKS
    horo.allreduce(np.ones(4), name="straggler", op=horo.Sum)

    # At run time: replaces the HORO_TIMELINE one (closing it); every rank calls it, rank 0 writes.
    # Neither waits for an idle background thread's next pass (once 10 s each on rank 0).
    started = time.monotonic()
    horo.start_timeline(str(_out() / f"runtime.rank{rank}.json"), mark_cycles=True)
    assert time.monotonic() - started < 3, f"start_timeline took {time.monotonic() - started:.1f}s"
    horo.allreduce(np.ones(8), name="late.sum", op=horo.Sum)
    time.sleep(0.2)  # the engine goes idle
    started = time.monotonic()
    horo.stop_timeline()
    assert time.monotonic() - started < 3, f"stop_timeline took {time.monotonic() - started:.1f}s"
    horo.allreduce(np.ones(8), name="untraced", op=horo.Sum)
    MPI.COMM_WORLD.Barrier()
    if rank == 0:
        assert (_out() / "runtime.rank0.json").read_text().rstrip().endswith("]"), "stop_timeline left it open"
    horo.shutdown()


def test_timeline_off_writes_nothing():
    import horo

    horo.init()
    horo.allreduce(np.ones(8), name="quiet", op=horo.Sum)
    horo.broadcast(np.ones(8), root_rank=0, name="quiet.bcast")
    horo.shutdown()
