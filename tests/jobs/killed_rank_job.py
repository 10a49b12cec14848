"""A job one of whose ranks dies by SIGKILL (run under mpirun or horo-run, not pytest).

    python tests/jobs/killed_rank_job.py SCENARIO PIDDIR
SCENARIO: fused     - rank 1 dies while the ranks run fused allreduces of many small tensors
          broadcast - rank 1 dies in the middle of a loop of 8 MiB broadcasts
          idle      - every rank idles; the test kills rank 1 from outside
          point_to_point - rank 1 dies in a ring of 1 MiB sends and receives (its peers wait in recv)
Every rank writes its pid to PIDDIR/rank<r>.pid; the dying rank writes the time of its
death to PIDDIR/killed_at. The job must end promptly with a non-zero exit naming rank 1.
"""
import os
import signal
import sys
import time

import numpy as np

import horo

VICTIM = 1


def die_soon(after_calls):
    """Called once per collective: on the victim, SIGKILL itself at call `after_calls`."""
    calls = {"n": 0}

    def tick():
        calls["n"] += 1
        if horo.rank() == VICTIM and calls["n"] == after_calls:
            with open(os.path.join(piddir, "killed_at"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)

    return tick


def fused():
    tick = die_soon(after_calls=20)
    tensors = [np.full(1000 + i, horo.rank(), np.float32) for i in range(64)]
    for step in range(100000):
        handles = [horo.allreduce_async(t, name=f"grad.{i}", op=horo.Sum) for i, t in enumerate(tensors)]
        tick()  # the victim dies with its 64 tensors in flight, the others in the fused collective
        for h in handles:
            horo.synchronize(h)


def broadcast():
    tick = die_soon(after_calls=5)
    x = np.zeros(2 << 20, np.float32)
    for step in range(100000):
        h = horo.broadcast_async_(x, root_rank=0, name="weights")
        tick()
        horo.synchronize(h)


def point_to_point():
    tick = die_soon(after_calls=10)
    r, n = horo.rank(), horo.size()
    out, got = np.full(1 << 18, r, np.float32), np.empty(1 << 18, np.float32)
    for step in range(100000):
        hs = horo.isend(out, (r + 1) % n)
        tick()
        horo.recv(got, (r - 1) % n)
        horo.synchronize(hs)


def idle():
    horo.allreduce(np.ones(4), name="warm-up")
    with open(os.path.join(piddir, f"ready{horo.rank()}"), "w"):
        pass
    time.sleep(600)


if __name__ == "__main__":
    scenario, piddir = sys.argv[1], sys.argv[2]
    horo.init()
    with open(os.path.join(piddir, f"rank{horo.rank()}.pid"), "w") as f:
        f.write(str(os.getpid()))
    {"fused": fused, "broadcast": broadcast, "idle": idle, "point_to_point": point_to_point}[scenario]()
