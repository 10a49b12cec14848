"""The bad-input table (issue #14, item 4), shared by ranks_bad_input.py (NumPy, torch)
and ranks_bad_input_tf.py (TensorFlow).

A row is (api, function, case). Its Case builds the call at run time and says what every
rank must see: an exception of given types whose message names the argument (or the tensor),
or a result that a check accepts. Every rank runs every row in the same order; after each
row a good allreduce must still give the right sum, so a row that leaves the library broken
(a name left in flight, a rank out of step, a hang) fails the next check, not some later test.
"""
import inspect
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

RANK, SIZE = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


@dataclass
class Raises:
    types: tuple
    words: tuple = ()  # substrings the message must hold (case-insensitive)


@dataclass
class Returns:
    check: object  # check(result) -> None, raising AssertionError if wrong


@dataclass
class Case:
    label: str
    call: object  # call(ctx) -> result
    expect: object  # expect(ctx) -> Raises | Returns (may differ per rank: asymmetric rows)
    after: object = None  # after(ctx): cleanup that must work (e.g. synchronize the in-flight handle)


@dataclass
class Context:
    """What a row needs at run time: the API module, this rank, the process sets made for the table."""

    mod: object
    api: object
    rank: int
    size: int
    member_of_other: object = None  # a process set this rank is NOT in
    removed: object = None  # a process set added then removed
    state: dict = field(default_factory=dict)


def outcome(ctx, case):
    """(ok, report) of running `case` on this rank against its expectation."""
    expect = case.expect(ctx)
    try:
        result = case.call(ctx)
    except Exception as e:  # noqa: BLE001 - judged below
        if not isinstance(expect, Raises):
            return False, f"raised {type(e).__name__}: {str(e)[:300]}"
        if not isinstance(e, expect.types):
            names = "/".join(t.__name__ for t in expect.types)
            return False, f"expected {names}, got {type(e).__name__}: {str(e)[:300]}"
        missing = [w for w in expect.words if str(w).lower() not in str(e).lower()]
        if missing:
            return False, f"{type(e).__name__} message lacks {missing}: {str(e)[:300]}"
        return True, f"{type(e).__name__}: {str(e)[:120]}"
    if isinstance(expect, Raises):
        names = "/".join(t.__name__ for t in expect.types)
        return False, f"expected {names}, nothing was raised (returned {type(result).__name__})"
    try:
        expect.check(result)
    except AssertionError as e:
        return False, f"wrong result: {e}"
    return True, "returned as specified"


def raises(types, *words):
    return lambda ctx: Raises(types if isinstance(types, tuple) else (types,), words)


# ------------------------------------------------------------------ references

def data(r, zero_d=False):
    """Rank r's input: 2*size rows, small integers (exact in float32 in any order)."""
    if zero_d:
        return np.array(3.0 + r, np.float32)
    return np.arange(2 * SIZE, dtype=np.float32) + 10 * r


def share(x, r):
    """Rank r's rows of x's first dimension (the first rows % size ranks one more)."""
    rows = x.shape[0]
    counts = [rows // SIZE + (1 if q < rows % SIZE else 0) for q in range(SIZE)]
    start = sum(counts[:r])
    return x[start:start + counts[r]]


def ref_sum(xs, root):
    return sum(xs)


def ref_concat(xs, root):
    return np.concatenate([x.reshape(-1) if x.ndim == 0 else x for x in xs])


def ref_root(xs, root):
    return xs[root]


def ref_alltoall(xs, root):
    return np.concatenate([share(x, RANK) for x in xs])


def ref_reducescatter(xs, root):
    total = sum(xs)
    return share(total.reshape(1) if total.ndim == 0 else total, RANK)  # TF: a scalar is one row


def ref_gather(xs, root):
    return ref_concat(xs, root) if RANK == root else None


def ref_scatter(xs, root):
    x = xs[root]
    return share(x.reshape(1) if x.ndim == 0 else x, RANK)


def ref_reduce(xs, root):
    return sum(xs) if RANK == root else None



def run_row(comm, ctx, case, what):
    ok, report = outcome(ctx, case)
    if case.after is not None:
        case.after(ctx)
    reports = comm.allgather((ok, report))
    bad = [f"  rank {r}: {rep}" for r, (r_ok, rep) in enumerate(reports) if not r_ok]
    assert not bad, f"{what}:\n" + "\n".join(bad)


def check_good_collective(comm, ctx, what):
    """A good allreduce right after a row: the library still works and ranks are in step."""
    n = ctx.state["good"] = ctx.state.get("good", 0) + 1
    x = np.arange(5, dtype=np.float32) + ctx.rank * 10 + n
    expected = sum(np.arange(5, dtype=np.float32) + r * 10 + n for r in range(ctx.size))
    out = ctx.api.to_numpy(ctx.mod.allreduce(ctx.api.tensor(x), op=ctx.mod.Sum, name=f"good.after.{n}"))
    assert np.array_equal(out, expected), f"good allreduce after {what}: {out} != {expected}"
    # and the ranks ran the same rows (a rank that skipped one would be out of step here)
    labels = comm.allgather(what)
    assert len(set(labels)) == 1, f"ranks out of step: {labels}"


def public_functions(module):
    """Public callables of `module`'s __all__: functions and classes, not constants or exceptions."""
    out = set()
    for name in module.__all__:
        obj = getattr(module, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            continue
        if inspect.isclass(obj) or callable(obj):
            out.add(name)
    return out


def takes_no_required_argument(fn):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature
        return True
    return all(p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in sig.parameters.values())
