"""One rank of a job on the local Slurm (scripts/slurm.sh), run by tests/test_slurm.py and
benchmarks/slurm_launch_overhead.py.

`topology`: where MPI put this rank (host, local and cross rank) next to where Slurm says it is,
then hierarchical allreduce / allgather checked against NumPy; rank 0 prints one JSON line
`TOPOLOGY [...]` with every rank's row.
`long`: writes `<dir>/<rank>.pid` ("pid host") once its first allreduce is done, then allreduces
until killed: for scancel and a killed slurmd mid-job.
`timed`: one allreduce, then rank 0 prints `FIRST <t>` (the first collective done) and, after a
barrier, `LAST <t>` (the last collective done), wall-clock seconds, for the launch-overhead benchmark.
"""
import json
import os
import socket
import sys
import time

import numpy as np

import horo


def topology():
    n, me = horo.size(), horo.rank()
    mine = {"rank": me, "size": n, "host": socket.gethostname(), "local_rank": horo.local_rank(),
            "local_size": horo.local_size(), "cross_rank": horo.cross_rank(), "cross_size": horo.cross_size(),
            "slurm_nodeid": os.environ.get("SLURM_NODEID"), "slurm_localid": os.environ.get("SLURM_LOCALID")}
    from horo import _core

    mine["transport"] = _core.transport()
    # integer-valued data: every sum is exact, so the result must equal NumPy's bit for bit
    for count in (1, 7, 100_003):
        inputs = [np.arange(count, dtype=np.float32) % 7 + r for r in range(n)]
        out = horo.allreduce(inputs[me], op=horo.Sum, name=f"sum.{count}")
        assert np.array_equal(out, np.sum(np.stack(inputs), axis=0)), f"allreduce x{count} differs from NumPy"
    rows = np.full((me + 1, 3), me, dtype=np.int64)
    gathered = horo.allgather(rows, name="ragged")
    assert np.array_equal(gathered, np.concatenate([np.full((r + 1, 3), r) for r in range(n)])), "allgather"
    everyone = horo.allgather_object(mine, name="topology")
    if me == 0:
        print("TOPOLOGY " + json.dumps(everyone), flush=True)


def long_running(directory):
    x = np.ones(1 << 16, dtype=np.float32)
    horo.allreduce(x, name="first")
    with open(os.path.join(directory, f"{horo.rank()}.pid"), "w") as f:
        f.write(f"{os.getpid()} {socket.gethostname()}\n")
    step = 0
    while True:  # until the job is cancelled
        horo.allreduce(x, name=f"step.{step % 4}")
        step += 1
        time.sleep(0.01)


def timed():
    horo.allreduce(np.ones(16, dtype=np.float32), name="first")
    if horo.rank() == 0:
        print(f"FIRST {time.time():.6f}", flush=True)
    horo.barrier()
    if horo.rank() == 0:
        print(f"LAST {time.time():.6f}", flush=True)


def main():
    horo.init()
    mode = sys.argv[1]
    if mode == "topology":
        topology()
    elif mode == "long":
        long_running(sys.argv[2])
    elif mode == "timed":
        timed()
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    horo.shutdown()


if __name__ == "__main__":
    main()
