"""join(): ranks that run out of data keep taking part in the others' allreduces with
the op's identity until every rank has joined; join() returns the rank that joined last.

Runs inside each MPI rank (see conftest.py in this folder for how to launch it).
Rank k runs out of data after 3 + k steps (or 3 + (size - 1 - k): the last rank to
join is then rank 0, the coordinator). Each step allreduces several dtypes; the
expected result is the NumPy reduction over ALL ranks where a joined rank's input is
replaced by the op's identity (0 for Sum and Average, whose divisor stays the full
size; the largest value / +inf for Min; the lowest / -inf for Max; 1 for Product).
Cached runs reuse fixed tensor names every step (response cache hits); uncached runs
use fresh names. Any collective other than allreduce submitted while a rank has joined
fails with HoroError on the ranks that submitted it; after everyone joined, everything
works again.
"""
import time

import numpy as np
import pytest

from horo_reference import (
    OPS,
    check_result,
    is_int,
    kinds_for,
    make_rank_inputs,
    must_be_exact,
    np_dtype,
)
from rank_helpers import gather_and_compare, outcome_of

needs_two_ranks = pytest.mark.skipif(
    __import__("mpi4py.MPI", fromlist=["MPI"]).COMM_WORLD.Get_size() < 2, reason="needs at least two ranks"
)

JOIN_DTYPES = ["int32", "float32", "uint8", "int8", "int64", "float16", "bfloat16", "float64"]


def identity(op, dtype, shape):
    """What a joined rank stands in with."""
    dt = np_dtype(dtype)
    if op in ("Sum", "Average"):
        value = 0
    elif op == "Product":
        value = 1
    elif op == "Min":
        value = np.iinfo(dt).max if is_int(dt) else np.inf
    else:
        value = np.iinfo(dt).min if is_int(dt) else -np.inf
    return np.full(shape, value, dtype=dt)


def steps_of(order, size, k):
    return 3 + k if order == "ascending" else 3 + (size - 1 - k)


def run_until_out_of_data(hvd, op, cached, order, tag, shape=(5, 3), dtypes=JOIN_DTYPES):
    """Rank k allreduces every dtype for steps_of(k) steps (checking each result), then joins.
    Returns (steps done, what join() returned)."""
    size, rank = hvd.size(), hvd.rank()
    mine = steps_of(order, size, rank)
    for step in range(mine):
        active = [k for k in range(size) if step < steps_of(order, size, k)]
        pending = []
        for i, dtype in enumerate(dtypes):
            kind = kinds_for(dtype)[(step + i) % 2]
            key = (tag, op, dtype, step)
            inputs = make_rank_inputs(key, dtype, shape, op, kind, size)
            padded = [inputs[k] if k in active else identity(op, dtype, shape) for k in range(size)]
            name = f"{tag}.{op}.{dtype}" if cached else f"{tag}.{op}.{dtype}.fresh.step{step}"
            x = inputs[rank].copy()
            if step % 2:
                h = hvd.allreduce_async_(x, op=getattr(hvd, op), name=name)
            else:
                h = hvd.allreduce_async(x, op=getattr(hvd, op), name=name)
            pending.append((h, padded, must_be_exact(dtype, op, kind, size), f"{name} step {step} (active ranks {active})"))
        for h, padded, exact, what in reversed(pending):
            check_result(hvd.synchronize(h), padded, op, exact, what=what)
    return mine, hvd.join()


# ------------------------------------------------------------------ join alone


def test_join_when_every_rank_joins_at_once(hvd, comm):
    size = hvd.size()
    for _ in range(3):
        last = hvd.join()
        assert isinstance(last, int) and 0 <= last < size, f"join() returned {last!r}"
        gather_and_compare(comm, last, "join() result")


def test_join_returns_the_rank_that_joined_last(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    for last in range(size):
        if rank == last:
            time.sleep(0.5)
        got = hvd.join()
        assert got == last, f"rank {last} joined 0.5 s after the others, join() returned {got}"
    gather_and_compare(comm, True, "done")


# ------------------------------------------------------------------ ranks running out of data at different steps


@pytest.mark.parametrize("cached", [True, False], ids=["cached", "fresh_names"])
@pytest.mark.parametrize("op", OPS)
def test_ranks_run_out_of_data_one_step_apart(hvd, comm, op, cached):
    size, rank = hvd.size(), hvd.rank()
    mine, last = run_until_out_of_data(hvd, op, cached, "ascending", "join.asc")
    assert last == size - 1, f"rank {size - 1} ran {3 + size - 1} steps and joined last, join() returned {last}"
    gather_and_compare(comm, last, "join() result")


@pytest.mark.parametrize("op", ["Average", "Min", "Max"])
def test_the_coordinator_runs_out_last(hvd, comm, op):
    size = hvd.size()
    _, last = run_until_out_of_data(hvd, op, True, "descending", "join.desc")
    assert last == 0, f"rank 0 ran the most steps and joined last, join() returned {last}"
    gather_and_compare(comm, last, "join() result")


def test_scaled_sum_and_average_with_joined_ranks(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    for step in range(3 + rank):
        active = [k for k in range(size) if step < 3 + k]
        x = np.full(6, float(rank + 1), dtype=np.float64)
        got = hvd.allreduce(x, op=hvd.Sum, name="join.scaled", prescale_factor=2.0, postscale_factor=0.25)
        assert np.array_equal(got, np.full(6, sum(2.0 * (k + 1) for k in active) * 0.25)), f"step {step}: {got}"
        got = hvd.allreduce(x, name="join.default_average")  # Average: divides by the full size
        expected = sum(k + 1.0 for k in active) / size
        assert np.allclose(got, expected, rtol=1e-15, atol=0), f"step {step}: Average {got[0]} != {expected}"
    assert hvd.join() == size - 1
    gather_and_compare(comm, True, "done")


def test_grouped_and_large_allreduces_with_joined_ranks(hvd, comm):
    """Fused groups and tensors above the ring threshold while ranks have joined."""
    size, rank = hvd.size(), hvd.rank()
    for step in range(3 + rank):
        active = [k for k in range(size) if step < 3 + k]
        group = [make_rank_inputs(("join.grp", step, i), "int64", (i + 1, 2), "Sum", "wide", size) for i in range(5)]
        outs = hvd.grouped_allreduce([g[rank] for g in group], op=hvd.Sum, name="join.grp")
        for i, (out, g) in enumerate(zip(outs, group)):
            padded = [g[k] if k in active else identity("Sum", "int64", g[k].shape) for k in range(size)]
            check_result(out, padded, "Sum", True, what=f"grouped member {i} step {step}")
        big = make_rank_inputs(("join.big", step), "int32", (70000,), "Max", "wide", size)
        out = hvd.allreduce(big[rank], op=hvd.Max, name="join.big")
        padded = [big[k] if k in active else identity("Max", "int32", (70000,)) for k in range(size)]
        check_result(out, padded, "Max", True, what=f"large Max step {step}")
    assert hvd.join() == size - 1
    gather_and_compare(comm, True, "done")


# ------------------------------------------------------------------ other collectives while a rank has joined


def _others(hvd, size, root):
    """Collectives other than allreduce: (label, fn(name)); rooted ones at `root`."""
    return {
        "broadcast": lambda name: hvd.broadcast(np.arange(4.0), root, name=name),
        "broadcast_": lambda name: hvd.broadcast_(np.arange(4.0), root, name=name),
        "broadcast_async": lambda name: hvd.synchronize(hvd.broadcast_async(np.arange(4.0), root, name=name)),
        "allgather": lambda name: hvd.allgather(np.arange(3, dtype=np.int32), name=name),
        "alltoall": lambda name: hvd.alltoall(np.arange(2 * size, dtype=np.int32), name=name),
        "reducescatter": lambda name: hvd.reducescatter(np.arange(2.0 * size), op=hvd.Sum, name=name),
        "gather": lambda name: hvd.gather(np.arange(3.0), root, name=name),
        "scatter": lambda name: hvd.scatter(np.arange(2.0 * size), root, name=name),
        "reduce": lambda name: hvd.reduce(np.arange(3.0), root, op=hvd.Sum, name=name),
        "barrier": lambda name: hvd.barrier(name=name),
    }


@needs_two_ranks
@pytest.mark.parametrize("joined_first", ["rank0", "last_rank"])
def test_other_collectives_fail_while_a_rank_has_joined_and_work_after(hvd, comm, joined_first):
    size, rank = hvd.size(), hvd.rank()
    early = 0 if joined_first == "rank0" else size - 1
    others = [r for r in range(size) if r != early]
    root = others[-1]
    report = {}
    if rank == early:
        last = hvd.join()
    else:
        time.sleep(0.3)  # the early rank's join reaches the coordinator first
        # allreduce goes on, with the joined rank standing in with 0
        x = make_rank_inputs(("join.others.ar", joined_first), "int64", (4,), "Sum", "wide", size)
        padded = [x[k] if k != early else identity("Sum", "int64", (4,)) for k in range(size)]
        check_result(hvd.allreduce(x[rank], op=hvd.Sum, name="join.others.ar"), padded, "Sum", True, what="allreduce while joined")
        for entry, fn in _others(hvd, size, root).items():
            name = f"join.fail.{joined_first}.{entry}"
            exc_name, msg, exc = outcome_of(lambda: fn(name))
            report[entry] = (isinstance(exc, hvd.HoroError), exc_name, msg[:300], name.lower() in msg.lower())
        # and allreduce still goes on after the failures
        y = make_rank_inputs(("join.others.ar2", joined_first), "float32", (3,), "Min", "random", size)
        padded = [y[k] if k != early else identity("Min", "float32", (3,)) for k in range(size)]
        check_result(hvd.allreduce(y[rank], op=hvd.Min, name="join.others.ar2"), padded, "Min", True, what="allreduce after failures")
        last = hvd.join()
    assert last in others, f"rank {early} joined first, join() returned {last}"
    gather_and_compare(comm, last, "join() result")
    problems = []
    for r, rep in enumerate(comm.allgather(report)):
        for entry, (ok, exc_name, msg, named) in rep.items():
            if not ok:
                problems.append(f"  rank {r} {entry}: expected HoroError, got {exc_name or 'no exception'}: {msg}")
            elif not named:
                problems.append(f"  rank {r} {entry}: the error does not name the tensor: {msg}")
    assert not problems, f"with rank {early} joined:\n" + "\n".join(problems)
    # after everyone joined: the same names (the failed ones as well) work normally
    for entry, fn in _others(hvd, size, early).items():
        fn(f"join.fail.{joined_first}.{entry}")
    b = make_rank_inputs(("after.join.bc", joined_first), "float64", (4,), "Sum", "random", size)
    assert np.array_equal(hvd.broadcast(b[rank], early, name=f"join.fail.{joined_first}.broadcast"), b[early])
    x = make_rank_inputs(("after.join", joined_first), "int64", (4,), "Sum", "wide", size)
    check_result(hvd.allreduce(x[rank], op=hvd.Sum, name="join.others.ar"), x, "Sum", True, what="allreduce after join")
    gather_and_compare(comm, True, "done")


# ------------------------------------------------------------------ after join


def test_everything_works_after_join_with_every_rank_contributing(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    run_until_out_of_data(hvd, "Sum", True, "ascending", "join.asc", dtypes=["int32"])
    # the fixed names used while ranks had joined: now every rank contributes
    for op in OPS:
        for dtype in ("int32", "float32"):
            kind = kinds_for(dtype)[0]
            inputs = make_rank_inputs(("after", op, dtype), dtype, (5, 3), op, kind, size)
            out = hvd.allreduce(inputs[rank], op=getattr(hvd, op), name=f"join.asc.{op}.{dtype}")
            check_result(out, inputs, op, must_be_exact(dtype, op, kind, size), what=f"after join {op} {dtype}")
    g = [make_rank_inputs(("after.ag", r), "int8", (r + 1, 2), "Sum", "wide", 1)[0] for r in range(size)]
    assert np.array_equal(hvd.allgather(g[rank], name="after.join.ag"), np.concatenate(g))
    for root in range(size):
        b = [make_rank_inputs(("after.bc", root, r), "float32", (3,), "Sum", "random", 1)[0] for r in range(size)]
        assert np.array_equal(hvd.broadcast(b[rank], root, name="after.join.bc"), b[root])
    rs = make_rank_inputs("after.rs", "int64", (2 * size + 1,), "Sum", "wide", size)
    base, extra = divmod(2 * size + 1, size)
    s, c = rank * base + min(rank, extra), base + (rank < extra)
    check_result(hvd.reducescatter(rs[rank], op=hvd.Sum, name="after.join.rs"), [x[s : s + c] for x in rs], "Sum", True, what="rs")
    hvd.barrier()
    assert hvd.broadcast_object({"after": "join"} if rank == size - 1 else None, size - 1) == {"after": "join"}
    assert hvd.join() in range(size)
    gather_and_compare(comm, True, "done")
