"""One job on the namespaced cluster (scripts/cluster.sh), run by tests/test_cluster.py.

`collectives`: topology from MPI, then allreduce / allgather / broadcast over several dtypes
checked against NumPy (exact: integer-valued data) and bit-identical on every rank, then
the user's own MPI (mpi4py) after horo — the call that hung across hosts.
`killed`: one rank on a remote host dies mid-job; the launcher must end the job.
Exits non-zero (AssertionError) on any mismatch.
"""
import hashlib
import os
import socket
import sys
import time

import numpy as np
from mpi4py import MPI

import horo

DTYPES = ["float32", "float64", "int32", "float16", "uint8"]


def rank_input(rank, dtype, count, seed):
    # small integers: every sum is exact in every dtype (float16 up to 2048, uint8 wraps like NumPy)
    rng = np.random.default_rng(seed * 1000 + rank)
    return rng.integers(0, 8, size=count).astype(dtype)


def same_on_every_rank(array, what):
    digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
    digests = MPI.COMM_WORLD.allgather(digest)
    assert len(set(digests)) == 1, f"{what}: ranks disagree bitwise"


def check_collectives():
    world = MPI.COMM_WORLD
    n, me = horo.size(), horo.rank()
    expect_local, expect_cross = (int(v) for v in os.environ["HORO_TEST_TOPOLOGY"].split("x"))
    assert (horo.local_size(), horo.cross_size()) == (expect_local, expect_cross), (
        horo.local_size(), horo.cross_size())
    hosts = world.allgather((socket.gethostname(), horo.cross_rank(), horo.local_rank()))
    # ranks share a cross rank exactly when they share a host name
    assert len({h for h, _, _ in hosts}) == expect_cross, hosts
    assert all((a[0] == b[0]) == (a[1] == b[1]) for a in hosts for b in hosts), hosts
    mode = os.environ.get("HORO_HIERARCHICAL_ALLREDUCE", "auto")
    from horo import _core
    assert ("hierarchical" in _core.transport()) == (mode != "0"), (mode, _core.transport())

    for seed, dtype in enumerate(DTYPES):
        for count in (1, 7, 100_003):
            inputs = [rank_input(r, dtype, count, seed) for r in range(n)]
            expected = np.sum(np.stack(inputs), axis=0, dtype=dtype)
            out = horo.allreduce(inputs[me], op=horo.Sum, name=f"sum.{dtype}.{count}")
            assert out.dtype == np.dtype(dtype) and np.array_equal(out, expected), f"allreduce {dtype} x{count}"
            same_on_every_rank(out, f"allreduce {dtype} x{count}")
        # ragged allgather: rank r gives r + 1 rows
        rows = rank_input(me, dtype, 3 * (me + 1) * 1000, seed).reshape(-1, 3)
        out = horo.allgather(rows, name=f"gather.{dtype}")
        expected = np.concatenate([rank_input(r, dtype, 3 * (r + 1) * 1000, seed).reshape(-1, 3) for r in range(n)])
        assert np.array_equal(out, expected), f"allgather {dtype}"
        same_on_every_rank(out, f"allgather {dtype}")
        root = (seed * 3 + 1) % n  # roots on every host over the dtypes
        data = rank_input(root, dtype, 250_001, seed) if me == root else np.zeros(250_001, dtype)
        out = horo.broadcast(data, root, name=f"bcast.{dtype}")
        assert np.array_equal(out, rank_input(root, dtype, 250_001, seed)), f"broadcast {dtype} from {root}"
    # process sets across hosts: one rank per host (0, 2, 4), and two ranks on two hosts (1, 2)
    for members in ([r for r in range(0, n, 2)], [1, 2]):
        ps = horo.add_process_set(members)
        if me in members:
            inputs = [rank_input(r, np.int64, 5_001, 7) for r in members]
            out = horo.allreduce(inputs[members.index(me)], op=horo.Sum, name="ps.sum", process_set=ps)
            assert np.array_equal(out, np.sum(np.stack(inputs), axis=0)), f"allreduce on {members}"
            out = horo.allgather(inputs[members.index(me)][:10 * (me + 1)], name="ps.gather", process_set=ps)
            assert np.array_equal(out, np.concatenate([inputs[i][:10 * (r + 1)] for i, r in enumerate(members)]))
            out = horo.broadcast(inputs[members.index(me)], members[-1], name="ps.bcast", process_set=ps)
            assert np.array_equal(out, inputs[-1]), f"broadcast on {members}"
        horo.remove_process_set(ps)

    avg = horo.allreduce(np.full(1000, float(me), np.float32), name="avg")
    assert np.allclose(avg, (n - 1) / 2), "average"
    same_on_every_rank(avg, "average")

    # the user's own MPI while horo's thread runs: this hung across hosts before
    world.Barrier()
    total = np.ones(1000)
    world.Allreduce(MPI.IN_PLACE, total)
    assert total[0] == n
    assert world.allgather(me) == list(range(n))
    assert world.bcast("hello" if me == 0 else None) == "hello"
    sub = world.Split(me % 2, me)
    sub.Barrier()
    sub.Free()
    out = horo.allreduce(np.ones(10, np.int32), op=horo.Sum, name="after.mpi4py")
    assert out[0] == n
    world.Barrier()


def killed_remote_rank(kill=True):
    me = horo.rank()
    horo.allreduce(np.ones(10, np.float32), name="before")
    print(f"rank {me}: running as pid {os.getpid()} on {socket.gethostname()}", flush=True)
    if kill and me == horo.size() - 1:
        os._exit(17)  # dies without a word, like a node losing power
    deadline = time.time() + 120
    i = 0
    while time.time() < deadline:  # the launcher ends us; horo must not hang us past that
        horo.allreduce(np.ones(1000, np.float32), name=f"after.{i}")
        i += 1
    sys.exit(0)


if __name__ == "__main__":
    horo.init()
    {"collectives": check_collectives, "killed": killed_remote_rank,
     "link_down": lambda: killed_remote_rank(kill=False)}[sys.argv[1]]()
    print(f"rank {horo.rank()} on {socket.gethostname()}: ok", flush=True)
    horo.shutdown()
