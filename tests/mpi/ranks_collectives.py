"""broadcast, allgather, alltoall, reducescatter, gather, scatter, reduce, barrier and
the object collectives on every rank, against NumPy.

Runs inside each MPI rank (see conftest.py in this folder for how to launch it).
Every rank rebuilds every rank's input from seeds, so it knows what it must get:
data-movement collectives must match NumPy bit for bit (any dtype); reductions
(reducescatter, reduce) follow horo_reference (exact where the spec pins the result
down, within a rounding tolerance where the summation order is free). Cases cover
0-sized contributions, ragged first dimensions, uneven splits, every root, and
tensors above and below the ring threshold (HORO_RING_MIN_BYTES = 256 KiB), so that
the driver can run the suite under ring / mpi / fusion-off and compare the results.
"""
import time

import numpy as np
import pytest

from horo_reference import (
    DTYPES,
    OPS,
    check_result,
    digest,
    is_int,
    kinds_for,
    make_rank_inputs,
    must_be_exact,
    np_dtype,
)
from rank_helpers import gather_and_compare

# Sizes either side of the ring threshold (262144 bytes per contribution).
RING_MIN_BYTES = 262144


def data(key, dtype, shape, r):
    """Rank r's input for case `key`: full-range integers, random floats (no arithmetic done on them)."""
    kind = "wide" if is_int(np_dtype(dtype)) else "random"
    return make_rank_inputs((key, r), dtype, shape, "Sum", kind, 1)[0].reshape(shape)  # keeps 0-d arrays 0-d


def share(rows, size, r):
    """(start, count) of rank r's rows: the first rows % size ranks get one more."""
    base, extra = divmod(rows, size)
    return r * base + min(r, extra), base + (1 if r < extra else 0)


def assert_same(result, expected, what):
    assert isinstance(result, np.ndarray), f"{what}: result is {type(result).__name__}, not an ndarray"
    expected = np.asarray(expected)
    assert result.dtype == expected.dtype, f"{what}: dtype {result.dtype} != {expected.dtype}"
    assert result.shape == expected.shape, f"{what}: shape {result.shape} != {expected.shape}"
    if result.tobytes() != expected.tobytes():
        r, e = result.reshape(-1), expected.reshape(-1)
        diff = [i for i in range(r.size) if r[i : i + 1].tobytes() != e[i : i + 1].tobytes()]
        raise AssertionError(
            f"{what}: differs from the NumPy reference in {len(diff)} of {r.size} elements: "
            + ", ".join(f"[{i}] got {r[i]!r} expected {e[i]!r}" for i in diff[:5])
        )


def record(store, digests, key, result, exact=True, tol=None):
    store.add(key, result, exact, tol)
    digests.append((key, digest(result)))


def ragged_rows(size, pattern):
    """First-dimension length of each rank's contribution."""
    if pattern == "equal":
        return [3] * size
    if pattern == "ragged":
        return [r + 1 for r in range(size)]
    if pattern == "one_empty":  # the last rank contributes nothing (the only rank in a world of one)
        return [0 if r == size - 1 else 2 * r + 1 for r in range(size)]
    if pattern == "first_empty":
        return [0 if r == 0 else r + 2 for r in range(size)]
    if pattern == "all_empty":
        return [0] * size
    raise ValueError(pattern)


ROW_PATTERNS = ["equal", "ragged", "one_empty", "first_empty", "all_empty"]
TRAILING = [(), (3,), (2, 0), (2, 5)]


# ------------------------------------------------------------------ broadcast


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_every_root_every_entry_point(hvd, comm, store, dtype):
    size, rank = hvd.size(), hvd.rank()
    digests = []
    shapes = [(), (0,), (1,), (7,), (3, 0), (4, 5)]
    pending = []
    for root in range(size):
        for shape in shapes:
            key = f"broadcast.{dtype}.root{root}.{shape}"
            inputs = [data(key, dtype, shape, r) for r in range(size)]
            # sync, out of place
            x = inputs[rank].copy()
            out = hvd.broadcast(x, root)
            assert_same(out, inputs[root], f"{key} broadcast")
            assert x.tobytes() == inputs[rank].tobytes(), f"{key}: broadcast modified its input"
            assert out is not x and (out.size == 0 or not np.shares_memory(out, x)), f"{key}: output aliases input"
            record(store, digests, key, out)
            # sync, in place
            y = inputs[rank].copy()
            out = hvd.broadcast_(y, root_rank=root, name=f"{key}.inplace")
            assert out is y, f"{key}: broadcast_ must return the array it was given"
            assert_same(y, inputs[root], f"{key} broadcast_")
            # async, both kinds: synchronised later, in reverse order
            a = inputs[rank].copy()
            b = inputs[rank].copy()
            ha = hvd.broadcast_async(a, root, name=f"{key}.async")
            hb = hvd.broadcast_async_(b, root, name=f"{key}.async_")
            pending.append((key, ha, a, hb, b, inputs))
    for key, ha, a, hb, b, inputs in reversed(pending):
        outb = hvd.synchronize(hb)
        outa = hvd.synchronize(ha)
        assert_same(outa, inputs[root_of(key)], f"{key} broadcast_async")
        assert a.tobytes() == inputs[rank].tobytes(), f"{key}: broadcast_async modified its input"
        assert outb is b, f"{key}: broadcast_async_ must return the array it was given"
        assert_same(b, inputs[root_of(key)], f"{key} broadcast_async_")
    gather_and_compare(comm, digests, f"broadcast {dtype} digests")


def root_of(key):
    return int(key.split(".root")[1].split(".")[0])


def test_broadcast_large_tensors_from_every_root(hvd, comm, store):
    size, rank = hvd.size(), hvd.rank()
    digests = []
    for dtype, n in (("uint8", 3 * RING_MIN_BYTES + 5), ("float32", RING_MIN_BYTES // 4 + 3), ("bfloat16", 1021)):
        for root in range(size):
            key = f"broadcast.large.{dtype}.{n}.root{root}"
            inputs = [data(key, dtype, (n,), r) for r in range(size)]
            out = hvd.broadcast(inputs[rank], root, name=key)
            assert_same(out, inputs[root], key)
            record(store, digests, key, out)
    gather_and_compare(comm, digests, "large broadcast digests")


# ------------------------------------------------------------------ allgather


def _allgather_cases(size, dtype):
    for pattern in ROW_PATTERNS:
        for trailing in TRAILING:
            rows = ragged_rows(size, pattern)
            key = f"allgather.{dtype}.{pattern}.{trailing}"
            yield key, [data(key, dtype, (rows[r], *trailing), r) for r in range(size)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather_ragged_first_dimension(hvd, comm, store, dtype):
    """Sync calls (auto names) and async calls (explicit names, synchronised in reverse)."""
    size, rank = hvd.size(), hvd.rank()
    digests = []
    # a 0-d tensor counts as one row
    key = f"allgather.{dtype}.scalar"
    inputs = [data(key, dtype, (), r) for r in range(size)]
    out = hvd.allgather(inputs[rank])
    assert_same(out, np.stack(inputs), key)
    record(store, digests, key, out)

    for key, inputs in _allgather_cases(size, dtype):
        x = inputs[rank].copy()
        out = hvd.allgather(x)
        assert_same(out, np.concatenate(inputs), key)
        assert x.tobytes() == inputs[rank].tobytes(), f"{key}: allgather modified its input"
        record(store, digests, key, out)

    pending = []
    for i, (key, inputs) in enumerate(_allgather_cases(size, dtype)):
        pending.append((key, hvd.allgather_async(inputs[rank], name=f"ag.async.{dtype}.{i}"), inputs))
    for key, handle, inputs in reversed(pending):
        assert_same(hvd.synchronize(handle), np.concatenate(inputs), f"{key} (async)")
    gather_and_compare(comm, digests, f"allgather {dtype} digests")


def test_allgather_above_and_below_the_ring_threshold(hvd, comm, store):
    size, rank = hvd.size(), hvd.rank()
    digests = []
    cases = [
        # (dtype, rows per rank, trailing): the contributions below, around and above 256 KiB
        ("uint8", [1000 + 7 * r for r in range(size)], ()),
        ("float32", [RING_MIN_BYTES // 4 // 3 + r for r in range(size)], (3,)),  # one row short of/above
        ("float64", [RING_MIN_BYTES // 8 + 1 + 5 * r for r in range(size)], ()),
        ("int8", [(RING_MIN_BYTES // 5 + 3) * (r != 1) for r in range(size)], (5,)),  # rank 1 sends nothing
        ("float16", [RING_MIN_BYTES // 2 // 3 + 1 + r for r in range(size)], (3,)),
    ]
    for dtype, rows, trailing in cases:
        key = f"allgather.large.{dtype}.{rows[0]}"
        inputs = [data(key, dtype, (rows[r], *trailing), r) for r in range(size)]
        out = hvd.allgather(inputs[rank], name=key)
        assert_same(out, np.concatenate(inputs), key)
        record(store, digests, key, out)
    gather_and_compare(comm, digests, "large allgather digests")


def test_grouped_allgather_mixed_dtypes_and_shapes(hvd, comm, store):
    size, rank = hvd.size(), hvd.rank()
    digests = []
    for g in range(3):
        group = []
        for i, dtype in enumerate(DTYPES):
            rows = ragged_rows(size, ROW_PATTERNS[(g + i) % len(ROW_PATTERNS)])
            key = f"grouped_allgather.{g}.{i}.{dtype}"
            trailing = TRAILING[(g + i) % len(TRAILING)]
            group.append((key, [data(key, dtype, (rows[r], *trailing), r) for r in range(size)]))
        if g == 2:  # one big member: the group crosses the ring threshold
            key = "grouped_allgather.2.big"
            group.append((key, [data(key, "float32", (RING_MIN_BYTES // 4 + 11 * r,), r) for r in range(size)]))
        name = None if g == 0 else f"grouped_ag.{g}"
        outs = hvd.grouped_allgather([inputs[rank] for _, inputs in group], name=name)
        assert isinstance(outs, list) and len(outs) == len(group)
        for (key, inputs), out in zip(group, outs):
            assert_same(out, np.concatenate(inputs), key)
            record(store, digests, key, out)
    # the async form, synchronised member by member
    key = "grouped_allgather.async"
    inputs = [[data((key, i), "int32", (r + i, 2), r) for r in range(size)] for i in range(4)]
    handles = hvd.grouped_allgather_async([x[rank] for x in inputs], name=key)
    assert len(handles) == 4
    for h, x in zip(reversed(handles), reversed(inputs)):
        assert_same(hvd.synchronize(h), np.concatenate(x), key)
    gather_and_compare(comm, digests, "grouped allgather digests")


# ------------------------------------------------------------------ alltoall


def _alltoall_split_patterns(size, me, seed):
    """A splits list per rank: equal, with zeros, one rank sending nothing, everything to one rank."""
    rng = np.random.default_rng([seed, me])
    yield "equal", [2] * size
    yield "zeros", [0 if (j + me) % 2 else j + me + 1 for j in range(size)]
    yield "random", [int(v) for v in rng.integers(0, 5, size=size)]
    yield "silent_last", [0] * size if me == size - 1 else [me + 1] * size
    yield "all_to_zero", [5 if j == 0 else 0 for j in range(size)]
    yield "nothing", [0] * size


@pytest.mark.parametrize("dtype", DTYPES)
def test_alltoall_with_and_without_splits(hvd, comm, store, dtype):
    size, rank = hvd.size(), hvd.rank()
    digests = []
    for trailing in ((), (3,), (2, 0)):
        patterns = [list(_alltoall_split_patterns(size, r, 7)) for r in range(size)]
        for p in range(len(patterns[0])):
            pname = patterns[0][p][0]
            splits = [patterns[r][p][1] for r in range(size)]
            key = f"alltoall.{dtype}.{pname}.{trailing}"
            inputs = [data(key, dtype, (sum(splits[r]), *trailing), r) for r in range(size)]
            offsets = [np.concatenate([[0], np.cumsum(s)]).astype(int) for s in splits]
            expected = np.concatenate([inputs[j][offsets[j][rank] : offsets[j][rank + 1]] for j in range(size)])
            x = inputs[rank].copy()
            # splits as a list on even ranks and as a NumPy array on odd ones
            my_splits = splits[rank] if rank % 2 == 0 else np.array(splits[rank], dtype=np.int64)
            result = hvd.alltoall(x, splits=my_splits, name=key)
            assert isinstance(result, tuple) and len(result) == 2, f"{key}: alltoall with splits returns (output, splits)"
            out, received = result
            assert_same(out, expected, key)
            assert [int(v) for v in received] == [splits[j][rank] for j in range(size)], f"{key}: received splits {received}"
            assert x.tobytes() == inputs[rank].tobytes(), f"{key}: alltoall modified its input"
            digests.append((key, digest(out)))  # differs per rank: compared as a list

        # no splits: equal parts, as Horovod (rows that do not divide raise on every rank:
        # ranks_horovod_compat.py)
        for rows in sorted({0, size, 2 * size, 3 * size}):
            key = f"alltoall.{dtype}.nosplits.{rows}.{trailing}"
            inputs = [data(key, dtype, (rows, *trailing), r) for r in range(size)]
            start, count = share(rows, size, rank)
            expected = np.concatenate([inputs[j][start : start + count] for j in range(size)])
            out = hvd.alltoall(inputs[rank])
            assert not isinstance(out, tuple), f"{key}: alltoall without splits returns just the output"
            assert_same(out, expected, key)
            if rank == 0:
                store.add(key, out, True)
    every = comm.allgather(digests)
    assert all(len(d) == len(digests) for d in every)



class _Subclass(np.ndarray):
    """An ndarray of another type: not the common call, so it takes the full path."""


def test_the_common_blocking_call_goes_to_the_core_in_one_call_and_agrees_with_the_full_path(hvd, comm, monkeypatch):
    """allgather, alltoall (even parts), reducescatter, allreduce(_) and broadcast(_) of a plain
    NumPy array in the global set skip Python's checks (enqueue.plain_call); any other call must
    take the full path, and both must give the same bits."""
    import importlib

    from horo.tensors import empty_like

    size, rank = hvd.size(), hvd.rank()
    lanes = {c: importlib.import_module(f"horo.{c}") for c in ("allgather", "alltoall", "broadcast", "reducescatter", "allreduce")}
    x = data("plain", "float32", (2 * size, 3), rank)
    big = data("plain.big", "float64", (size, 8192 + 1), rank)  # an output from 64 KiB up is the core's (empty_like)
    # Each of these is refused by the lane without a collective (NotImplemented), on every rank alike.
    others = {"strided": x[:, ::2], "0-d": x[0, 0].reshape(()), "a subclass": x.view(_Subclass),
              "a list": x.tolist(), "a byte-swapped dtype": x.astype(">f4")}
    for what, other in others.items():
        assert lanes["allgather"]._plain(other, None, None) is NotImplemented, f"allgather took {what}"
        assert lanes["broadcast"]._plain_in_place(other, None, None, 0) is NotImplemented, f"broadcast_ took {what}"
    assert lanes["allgather"]._plain(x, 7, None) is NotImplemented, "a name not a str"
    assert lanes["allgather"]._plain(x, None, hvd.global_process_set) is NotImplemented, "a process set"
    assert lanes["broadcast"]._plain_in_place(x, None, None, 0.0) is NotImplemented, "a float root"
    for what, args in {"Adasum": (hvd.Adasum,), "a float op": (1.0,), "an int prescale": (hvd.Sum, 2),
                       "a str postscale": (hvd.Sum, 1.0, "2")}.items():
        assert lanes["reducescatter"]._plain(x, None, None, 0, *args) is NotImplemented, f"reducescatter took {what}"
        assert lanes["allreduce"]._plain_in_place(x, None, None, 0, *args) is NotImplemented, f"allreduce_ took {what}"
    readonly = x.copy()
    readonly.flags.writeable = False
    assert lanes["broadcast"]._plain_in_place(readonly, None, None, 0) is NotImplemented, "a read-only array in place"
    outputs = {"none": None, "read-only": readonly, "another shape": x[:1].copy(), "another dtype": x.astype(np.float64),
               "a subclass": x.copy().view(_Subclass), "Fortran order": np.asfortranarray(np.ones((2 * size, 3), np.float32))}
    for what, output in outputs.items():
        for collective in ("allreduce", "broadcast"):
            lane = lanes[collective]._plain(x, None, None, 0, None, 1.0, 1.0, output)
            assert lane is NotImplemented, f"{collective} took {what} as its output"
    assert lanes["allgather"]._plain(x, None, None, 0, None, 1.0, 1.0, x.copy()) is NotImplemented, "an allgather output"
    if size > 1:
        assert lanes["alltoall"]._plain(x[:size + 1], None, None) is NotImplemented, "rows that do not divide"

    expected = np.concatenate([data("plain", "float32", (2 * size, 3), r) for r in range(size)])
    fast = lanes["allgather"]._plain(x, "plain.allgather", None)
    assert fast is not NotImplemented, "the common allgather took the full path"
    assert_same(fast, expected, "allgather, the core's lane")
    assert_same(hvd.allgather(x.view(_Subclass), name="plain.allgather.full"), expected, "allgather, the full path")

    cases = {  # (the lane, the full path through the public function)
        "alltoall": (lambda a: lanes["alltoall"]._plain(a, "plain.lane", None),
                     lambda a: hvd.alltoall(a, name="plain.full")),
        "reducescatter": (lambda a: lanes["reducescatter"]._plain(a, "plain.lane", None),
                          lambda a: hvd.reducescatter(a, name="plain.full")),
        "reducescatter, Sum, scaled": (lambda a: lanes["reducescatter"]._plain(a, "plain.lane", None, 0, hvd.Sum, 0.5, 3.0),
                                       lambda a: hvd.reducescatter(a, hvd.Sum, "plain.full", 0.5, 3.0)),
        "allreduce_, Max": (lambda a: lanes["allreduce"]._plain_in_place(a, "plain.lane", None, 0, hvd.Max),
                            lambda a: hvd.allreduce_(a, op=hvd.Max, name="plain.full")),
        "allreduce, Sum, 64 KiB": (lambda a: lanes["allreduce"]._plain(big, "plain.lane", None, 0, hvd.Sum, 1.0, 1.0,
                                                                       empty_like(big)),
                                   lambda a: hvd.allreduce(big.view(_Subclass), op=hvd.Sum, name="plain.full")),
        "broadcast": (lambda a: lanes["broadcast"]._plain(a, "plain.lane", None, size - 1, None, 1.0, 1.0, np.empty_like(a)),
                      lambda a: hvd.broadcast(a, size - 1, name="plain.full")),
        "broadcast, 64 KiB": (lambda a: lanes["broadcast"]._plain(big, "plain.lane", None, 0, None, 1.0, 1.0,
                                                                  empty_like(big)),
                              lambda a: hvd.broadcast(big.view(_Subclass), 0, name="plain.full")),
    }
    for what, (lane, full) in cases.items():
        mine = x.copy()
        fast = lane(mine)
        assert fast is not NotImplemented, f"the common {what} took the full path"
        assert_same(np.asarray(fast), np.asarray(full(x.copy().view(_Subclass))), f"{what}: the core's lane against the full path")
        assert not what.startswith("allreduce_") or fast is mine, f"{what}: in place, the array given comes back"

    root = size - 1
    y = x.copy()
    assert lanes["broadcast"]._plain_in_place(y, None, None, root) is y, "the common broadcast_ took the full path"
    assert_same(y, data("plain", "float32", (2 * size, 3), root), "broadcast_, the core's lane")

    # gather, scatter and reduce: the root's result; the others get None from gather and reduce, as on the full path.
    rooted = importlib.import_module("horo.rooted")
    for what, (lane, full) in {
        "gather": (lambda a: rooted._plain_gather(a, "plain.lane", None, root),
                   lambda a: hvd.gather(a, root, name="plain.full")),
        "scatter": (lambda a: rooted._plain_scatter(a, "plain.lane", None, root),
                    lambda a: hvd.scatter(a, root, name="plain.full")),
        "reduce, Max": (lambda a: rooted._plain_reduce(a, "plain.lane", None, root, hvd.Max, 1.0, 1.0, empty_like(a)),
                        lambda a: hvd.reduce(a, root, op=hvd.Max, name="plain.full")),
        "reduce, 64 KiB, scaled": (lambda a: rooted._plain_reduce(big, "plain.lane", None, 0, hvd.Sum, 1.0, 2.0,
                                                                  empty_like(big)),
                                   lambda a: hvd.reduce(big.view(_Subclass), 0, op=hvd.Sum, name="plain.full",
                                                        postscale_factor=2.0)),
    }.items():
        fast, slow = lane(x.copy()), full(x.copy().view(_Subclass))
        assert fast is not NotImplemented, f"the common {what} took the full path"
        if slow is None:
            assert fast is None, f"{what}: a result off the root, {fast!r}"
        else:
            assert_same(np.asarray(fast), np.asarray(slow), f"{what}: the core's lane against the full path")
    assert rooted._plain_reduce(x, None, None, root, None, 1.0, 1.0, None) is NotImplemented, "a reduce without an output"

    # The public functions take the lane for a plain array: none enters its module's full path.
    def full_path(*args):
        raise AssertionError(f"the full path was taken: _start{args[:1]}...")

    for module in lanes.values():
        monkeypatch.setattr(module, "_start", full_path)
    for rooted_start in ("_gather", "_scatter", "_reduce"):
        monkeypatch.setattr(rooted, rooted_start, full_path)
    for call in (lambda: hvd.allgather(x), lambda: hvd.alltoall(x), lambda: hvd.reducescatter(x),
                 lambda: hvd.reducescatter(x, op=hvd.Sum, prescale_factor=2.0), lambda: hvd.allreduce(x),
                 lambda: hvd.allreduce(big, op=hvd.Min), lambda: hvd.allreduce_(x.copy(), name="in place"),
                 lambda: hvd.broadcast(x, root), lambda: hvd.broadcast(big, 0), lambda: hvd.broadcast_(x.copy(), 0),
                 lambda: hvd.gather(x, root), lambda: hvd.scatter(x, 0), lambda: hvd.reduce(x, root),
                 lambda: hvd.reduce(big, 0, op=hvd.Sum, prescale_factor=2.0)):
        call()


def test_ranks_on_the_lane_and_ranks_on_the_full_path_meet_in_one_collective(hvd):
    """Each rank decides alone whether its call is plain: odd ranks pass an ndarray subclass (the
    full path), even ranks a plain array (the core's lane). Both must describe the same collective
    (name, op, root, scales), or the coordinator would find them mismatched."""
    size, rank = hvd.size(), hvd.rank()
    inputs = [data("mixed", "float32", (2 * size, 3), r) for r in range(size)]
    mine = inputs[rank].copy()
    mine = mine.view(_Subclass) if rank % 2 else mine
    total = np.sum(inputs, axis=0, dtype=np.float32) if size <= 2 else None
    assert_same(np.asarray(hvd.allgather(mine)), np.concatenate(inputs), "allgather, mixed paths")
    assert_same(np.asarray(hvd.broadcast(mine, size - 1)), inputs[size - 1], "broadcast, mixed paths")
    assert_same(np.asarray(hvd.broadcast_(mine.copy(), 0)), inputs[0], "broadcast_, mixed paths")
    assert_same(np.asarray(hvd.scatter(mine, 0)), inputs[0][2 * rank:2 * rank + 2], "scatter, mixed paths")
    for name, got, expected in (("gather", hvd.gather(mine, size - 1), np.concatenate(inputs)),
                                ("reduce", hvd.reduce(mine, size - 1, op=hvd.Max), np.max(inputs, axis=0))):
        if rank == size - 1:
            assert_same(np.asarray(got), expected, f"{name}, mixed paths")
        else:
            assert got is None, f"{name}, mixed paths: a result off the root"
    alltoall = np.asarray(hvd.alltoall(mine))
    assert_same(alltoall, np.concatenate([inputs[r][2 * rank:2 * rank + 2] for r in range(size)]), "alltoall, mixed paths")
    for name, call in (("allreduce", lambda: hvd.allreduce(mine, op=hvd.Max)),
                       ("allreduce_", lambda: hvd.allreduce_(mine.copy(), op=hvd.Max)),
                       ("reducescatter", lambda: hvd.reducescatter(mine, op=hvd.Max))):
        expected = np.max(inputs, axis=0)  # Max: exact in any order
        if name == "reducescatter":
            expected = expected[2 * rank:2 * rank + 2]
        assert_same(np.asarray(call()), expected, f"{name}, mixed paths")
    # The default op (Average) of both paths, where NumPy's float32 mean is exact in any order (two ranks).
    if total is not None:
        average = np.asarray(total / np.float32(size))
        assert_same(np.asarray(hvd.allreduce(mine)), average, "allreduce, default op, mixed paths")
        assert_same(np.asarray(hvd.reducescatter(mine)), average[2 * rank:2 * rank + 2], "reducescatter, default op, mixed paths")


def test_the_lane_from_several_python_threads_at_once(hvd):
    """Blocking calls of plain arrays from four threads at once, each thread its own names
    (the lane describes a call in a per-thread entry that the queue swaps for a finished
    one's buffers): every result exact, on every rank, names past the short-string buffer."""
    import threading

    size, rank = hvd.size(), hvd.rank()
    failures = []

    def work(t):
        try:
            for i in range(150):
                x = np.full(64 + t, rank + i + t, np.float32)
                hvd.allreduce_(x, name=f"thread {t}: a name past fifteen characters", op=hvd.Sum)
                if not np.all(x == sum(r + i + t for r in range(size))):
                    failures.append(f"thread {t}, call {i}: allreduce_ gave {x[0]}")
                g = hvd.allgather(np.full(3, 10 * t + rank, np.int64), name=f"thread {t}: gathered, also long")
                if not np.array_equal(g, np.repeat(np.arange(size) + 10 * t, 3)):
                    failures.append(f"thread {t}, call {i}: allgather gave {g}")
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(f"thread {t}: {e!r}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, "\n".join(failures[:5])


def test_alltoall_above_and_below_the_ring_threshold_and_async(hvd, comm, store):
    size, rank = hvd.size(), hvd.rank()
    pending = []
    for dtype, rows, trailing in (("float64", RING_MIN_BYTES // 8 // 2 + 3, (2,)), ("uint8", 4099, ()), ("int64", 17, (3,))):
        splits = [[share(rows + r, size, j)[1] for j in range(size)] for r in range(size)]
        key = f"alltoall.large.{dtype}"
        inputs = [data(key, dtype, (rows + r, *trailing), r) for r in range(size)]
        offsets = [np.concatenate([[0], np.cumsum(s)]).astype(int) for s in splits]
        expected = np.concatenate([inputs[j][offsets[j][rank] : offsets[j][rank + 1]] for j in range(size)])
        pending.append((key, hvd.alltoall_async(inputs[rank], splits=splits[rank], name=key), expected, splits))
        key2 = key + ".nosplits"
        even_rows = rows - rows % size  # without splits, the first dimension divides equally (Horovod)
        inputs2 = [data(key2, dtype, (even_rows, *trailing), r) for r in range(size)]
        start, count = share(even_rows, size, rank)
        expected2 = np.concatenate([x[start : start + count] for x in inputs2])
        pending.append((key2, hvd.alltoall_async(inputs2[rank], name=key2), expected2, None))
    for key, handle, expected, splits in reversed(pending):
        result = hvd.synchronize(handle)
        if splits is None:
            assert_same(result, expected, key)
        else:
            out, received = result
            assert_same(out, expected, key)
            assert [int(v) for v in received] == [splits[j][rank] for j in range(size)], f"{key}: {received}"
        if rank == 0:
            store.add(key, result if splits is None else result[0], True)
    gather_and_compare(comm, True, "alltoall done")


# ------------------------------------------------------------------ reducescatter

RS_ROWS = lambda size: sorted({0, 1, max(size - 1, 1), size, 2 * size + 1, 3 * size + (size - 1), 11})  # noqa: E731


def _check_rs(store, digests, key, out, inputs, op, exact, rank, size, pre=1.0, post=1.0):
    rows = inputs[0].shape[0]
    start, count = share(rows, size, rank)
    mine = [x[start : start + count] for x in inputs]
    exact, tol = check_result(out, mine, op, exact, pre, post, what=key)
    if rank == 0:
        store.add(key, out, exact, tol)
    digests.append((key, digest(out)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_reducescatter_every_op_uneven_rows(hvd, comm, store, op, dtype):
    """Rows not divisible by size, rows < size (some ranks get nothing), 0 rows."""
    size, rank = hvd.size(), hvd.rank()
    digests = []
    sync_kind, async_kind = kinds_for(dtype)
    pending = []
    for rows in RS_ROWS(size):
        for trailing in ((), (3,), (2, 0)):
            key = f"reducescatter.{op}.{dtype}.{rows}.{trailing}"
            inputs = make_rank_inputs(key, dtype, (rows, *trailing), op, sync_kind, size)
            x = inputs[rank].copy()
            out = hvd.reducescatter(x, op=getattr(hvd, op))
            assert x.tobytes() == inputs[rank].tobytes(), f"{key}: reducescatter modified its input"
            _check_rs(store, digests, key, out, inputs, op, must_be_exact(dtype, op, sync_kind, size), rank, size)

            akey = key + ".async"
            ainputs = make_rank_inputs(akey, dtype, (rows, *trailing), op, async_kind, size)
            pending.append((akey, hvd.reducescatter_async(ainputs[rank], op=getattr(hvd, op), name=akey), ainputs))
    for akey, handle, ainputs in reversed(pending):
        exact = must_be_exact(dtype, op, async_kind, size)
        _check_rs(store, digests, akey, hvd.synchronize(handle), ainputs, op, exact, rank, size)
    gather_and_compare(comm, len(digests), "number of reducescatter results")


def test_reducescatter_defaults_to_average(hvd, comm, store):
    size, rank = hvd.size(), hvd.rank()
    digests = []
    for dtype in ("int32", "float64"):
        key = f"reducescatter.default_op.{dtype}"
        kind = kinds_for(dtype)[0]
        inputs = make_rank_inputs(key, dtype, (2 * size + 1, 2), "Average", kind, size)
        out = hvd.reducescatter(inputs[rank], name=key)
        _check_rs(store, digests, key, out, inputs, "Average", must_be_exact(dtype, "Average", kind, size), rank, size)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reducescatter_prescale_and_postscale(hvd, comm, store, dtype):
    size, rank = hvd.size(), hvd.rank()
    digests = []
    for op, pre, post in (("Sum", 0.5, 1.0), ("Sum", 1.0, 2.0), ("Sum", 2.0, 0.5), ("Max", 0.5, 2.0)):
        key = f"reducescatter.scale.{op}.{pre}.{post}.{dtype}"
        inputs = make_rank_inputs(key, dtype, (3 * size + 1, 2), op, "scale", size)
        out = hvd.reducescatter(inputs[rank], op=getattr(hvd, op), name=key, prescale_factor=pre, postscale_factor=post)
        _check_rs(store, digests, key, out, inputs, op, must_be_exact(dtype, op, "scale", size, pre, post), rank, size, pre, post)


def test_reducescatter_above_and_below_the_ring_threshold(hvd, comm, store):
    size, rank = hvd.size(), hvd.rank()
    digests = []
    cases = [
        ("int32", "Sum", "wide", (RING_MIN_BYTES // 4 + 5,)),  # integer Sum: exact whatever the algorithm
        ("int64", "Sum", "wide", (RING_MIN_BYTES // 8 // 3 + 1, 3)),
        ("uint8", "Max", "wide", (RING_MIN_BYTES + 3,)),
        ("float32", "Sum", "exact", (RING_MIN_BYTES // 4 // 5 + 1, 5)),
        ("float64", "Sum", "random", (RING_MIN_BYTES // 8 + 7,)),
        ("float16", "Average", "exact", (RING_MIN_BYTES // 2 + 9,)),
        ("bfloat16", "Min", "random", (RING_MIN_BYTES // 2 + 1,)),
        ("float32", "Sum", "exact", (1001,)),  # below
        ("int8", "Product", "wide", (999, 2)),  # below
    ]
    for dtype, op, kind, shape in cases:
        key = f"reducescatter.large.{op}.{dtype}.{shape}"
        inputs = make_rank_inputs(key, dtype, shape, op, kind, size)
        out = hvd.reducescatter(inputs[rank], op=getattr(hvd, op), name=key)
        _check_rs(store, digests, key, out, inputs, op, must_be_exact(dtype, op, kind, size), rank, size)


def test_grouped_reducescatter(hvd, comm, store):
    size, rank = hvd.size(), hvd.rank()
    digests = []
    for op in ("Sum", "Max", "Average"):
        group = []
        for i, dtype in enumerate(DTYPES):
            kind = kinds_for(dtype)[0]
            rows = [0, 1, size + 1, 2 * size - 1, 5, 3 * size][i % 6]
            key = f"grouped_reducescatter.{op}.{i}.{dtype}"
            group.append((key, dtype, kind, make_rank_inputs(key, dtype, (rows, 2), op, kind, size)))
        key = f"grouped_reducescatter.{op}.big"
        group.append((key, "int64", "wide", make_rank_inputs(key, "int64", (RING_MIN_BYTES // 8 + 3,), op, "wide", size)))
        outs = hvd.grouped_reducescatter([g[3][rank] for g in group], op=getattr(hvd, op), name=f"grs.{op}")
        assert isinstance(outs, list) and len(outs) == len(group)
        for (key, dtype, kind, inputs), out in zip(group, outs):
            _check_rs(store, digests, key, out, inputs, op, must_be_exact(dtype, op, kind, size), rank, size)
    key = "grouped_reducescatter.async"
    group = [make_rank_inputs((key, i), "float64", (size + i, 3), "Sum", "exact", size) for i in range(4)]
    handles = hvd.grouped_reducescatter_async([g[rank] for g in group], op=hvd.Sum, name=key)
    for i, (h, inputs) in reversed(list(enumerate(zip(handles, group)))):
        _check_rs(store, digests, f"{key}.{i}", hvd.synchronize(h), inputs, "Sum", True, rank, size)


# ------------------------------------------------------------------ gather, scatter, reduce


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_to_every_root_ragged(hvd, comm, store, dtype):
    size, rank = hvd.size(), hvd.rank()
    digests = []
    pending = []
    for root in range(size):
        for pattern in ROW_PATTERNS:
            for trailing in ((), (2, 3), (0,)):
                rows = ragged_rows(size, pattern)
                key = f"gather.{dtype}.root{root}.{pattern}.{trailing}"
                inputs = [data(key, dtype, (rows[r], *trailing), r) for r in range(size)]
                x = inputs[rank].copy()
                out = hvd.gather(x, root_rank=root)
                assert x.tobytes() == inputs[rank].tobytes(), f"{key}: gather modified its input"
                if rank == root:
                    assert_same(out, np.concatenate(inputs), key)
                    record(store, digests, key, out)
                else:
                    assert out is None, f"{key}: gather returned {type(out).__name__} on non-root rank {rank}"
                pending.append((key, root, hvd.gather_async(inputs[rank], root, name=key), inputs))
        key = f"gather.{dtype}.root{root}.scalar"
        inputs = [data(key, dtype, (), r) for r in range(size)]
        out = hvd.gather(inputs[rank], root_rank=root, name=key)
        if rank == root:
            assert_same(out, np.stack(inputs), key)
        else:
            assert out is None, f"{key}: non-root got {out!r}"
    for key, root, handle, inputs in reversed(pending):
        out = hvd.synchronize(handle)
        if rank == root:
            assert_same(out, np.concatenate(inputs), f"{key} (async)")
        else:
            assert out is None, f"{key} (async): non-root got {type(out).__name__}"
    gather_and_compare(comm, len(pending), "gather cases")


def test_gather_default_root_and_large(hvd, comm, store):
    size, rank = hvd.size(), hvd.rank()
    key = "gather.default_root"
    inputs = [data(key, "float32", (r + 2, 2), r) for r in range(size)]
    out = hvd.gather(inputs[rank])
    if rank == 0:
        assert_same(out, np.concatenate(inputs), key)
    else:
        assert out is None
    for root in range(size):
        key = f"gather.large.root{root}"
        inputs = [data(key, "int32", (RING_MIN_BYTES // 4 + 3 * r,), r) for r in range(size)]
        out = hvd.gather(inputs[rank], root, name=key)
        if rank == root:
            assert_same(out, np.concatenate(inputs), key)
            if rank == 0:
                store.add(key, out, True)
        else:
            assert out is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_from_every_root_uneven(hvd, comm, store, dtype):
    """Every rank passes a tensor of the same shape; only the root's values count."""
    size, rank = hvd.size(), hvd.rank()
    digests = []
    pending = []
    for root in range(size):
        for rows in sorted({0, 1, size - 1 or 1, size, 2 * size + 1, 7}):
            for trailing in ((), (3,), (2, 0)):
                key = f"scatter.{dtype}.root{root}.{rows}.{trailing}"
                inputs = [data(key, dtype, (rows, *trailing), r) for r in range(size)]
                start, count = share(rows, size, rank)
                expected = inputs[root][start : start + count]
                x = inputs[rank].copy()
                out = hvd.scatter(x, root_rank=root)
                assert_same(out, expected, key)
                assert x.tobytes() == inputs[rank].tobytes(), f"{key}: scatter modified its input"
                record(store, digests, key, out)
                pending.append((key, hvd.scatter_async(inputs[rank], root, name=key), expected))
    for key, handle, expected in reversed(pending):
        assert_same(hvd.synchronize(handle), expected, f"{key} (async)")
    gather_and_compare(comm, len(digests), "scatter cases")


def test_scatter_default_root_and_large(hvd, comm, store):
    size, rank = hvd.size(), hvd.rank()
    for root, rows in ((None, 2 * size + 1), (size - 1, RING_MIN_BYTES // 8 + 5)):
        key = f"scatter.large.{root}.{rows}"
        inputs = [data(key, "float64", (rows,), r) for r in range(size)]
        start, count = share(rows, size, rank)
        out = hvd.scatter(inputs[rank], name=key) if root is None else hvd.scatter(inputs[rank], root, name=key)
        assert_same(out, inputs[0 if root is None else root][start : start + count], key)


def test_reducescatter_and_scatter_given_no_output_return_one_the_core_made(hvd):
    """The core's own entry point takes output=None for these too, as for allgather: it must
    allocate this rank's share, not write it through a null pointer (it crashed before)."""
    from horo import dtypes
    from horo._native import _core

    size, rank = hvd.size(), hvd.rank()
    rows = 2 * size + 1
    start, count = share(rows, size, rank)
    inputs = [data("core.run", "int64", (rows, 3), r) for r in range(size)]
    code = dtypes.code_of(inputs[rank].dtype, "core.run")
    for collective, root, expected in (("reducescatter", 0, np.sum(inputs, axis=0)), ("scatter", size - 1, inputs[-1])):
        data_, shape = _core.run(_core.collective_codes[collective], f"core.run.{collective}", inputs[rank], None,
                                 code, 1, 1.0, 1.0, root, [], 0)[:2]
        got = data_.view(np.int64).reshape(shape)
        assert_same(got, expected[start : start + count], f"core.run {collective}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_reduce_to_every_root(hvd, comm, store, op, dtype):
    size, rank = hvd.size(), hvd.rank()
    pending = []
    for root in range(size):
        for i, shape in enumerate([(), (0,), (7,), (3, 5)]):
            kind = kinds_for(dtype)[i % 2]
            key = f"reduce.{op}.{dtype}.root{root}.{shape}"
            inputs = make_rank_inputs(key, dtype, shape, op, kind, size)
            exact = must_be_exact(dtype, op, kind, size)
            x = inputs[rank].copy()
            out = hvd.reduce(x, root_rank=root, op=getattr(hvd, op))
            assert x.tobytes() == inputs[rank].tobytes(), f"{key}: reduce modified its input"
            if rank == root:
                check_result(out, inputs, op, exact, what=key)
            else:
                assert out is None, f"{key}: reduce returned {type(out).__name__} on non-root rank {rank}"
            akey = key + ".async"
            ainputs = make_rank_inputs(akey, dtype, shape, op, kind, size)
            pending.append((akey, root, hvd.reduce_async(ainputs[rank], root, op=getattr(hvd, op), name=akey), ainputs, exact))
    for akey, root, handle, ainputs, exact in reversed(pending):
        out = hvd.synchronize(handle)
        if rank == root:
            check_result(out, ainputs, op, exact, what=akey)
        else:
            assert out is None, f"{akey}: non-root got {type(out).__name__}"


def test_reduce_defaults_and_scaling_and_large(hvd, comm, store):
    size, rank = hvd.size(), hvd.rank()
    key = "reduce.default"
    inputs = make_rank_inputs(key, "float64", (9,), "Average", "exact", size)
    out = hvd.reduce(inputs[rank])  # root 0, Average
    if rank == 0:
        check_result(out, inputs, "Average", must_be_exact("float64", "Average", "exact", size), what=key)
    else:
        assert out is None
    key = "reduce.scaled"
    inputs = make_rank_inputs(key, "int32", (11,), "Sum", "scale", size)
    out = hvd.reduce(inputs[rank], size - 1, op=hvd.Sum, name=key, prescale_factor=0.5, postscale_factor=2.0)
    if rank == size - 1:
        check_result(out, inputs, "Sum", True, 0.5, 2.0, what=key)
    else:
        assert out is None
    for root in range(size):
        key = f"reduce.large.root{root}"
        inputs = make_rank_inputs(key, "int64", (RING_MIN_BYTES // 8 + 1,), "Sum", "wide", size)
        out = hvd.reduce(inputs[rank], root, op=hvd.Sum, name=key)
        if rank == root:
            check_result(out, inputs, "Sum", True, what=key)
        else:
            assert out is None


# ------------------------------------------------------------------ barrier


def test_barrier_waits_for_the_slowest_rank(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    comm.Barrier()
    for slow in range(size):
        if rank == slow:
            time.sleep(0.3)
        before = time.time()
        assert hvd.barrier() is None
        after = time.time()
        befores = comm.allgather(before)
        afters = comm.allgather(after)
        # nobody leaves the barrier before the slow rank has entered it
        assert min(afters) >= befores[slow] - 0.01, f"slow rank {slow}: entered at {befores}, left at {afters}"
    for i in range(5):
        hvd.barrier(name=f"barrier.named.{i}") if i % 2 else hvd.barrier()


# ------------------------------------------------------------------ objects

OBJECTS = [
    None,
    0,
    "héllo",
    {"a": [1, 2.5, None], "b": (b"\x00\xff", {"nested": True})},
    np.arange(12, dtype=np.float32).reshape(3, 4),
    list(range(10000)),
    b"",
    bytes(range(256)) * (1 + 5 * 4096),  # > 5 MiB
]


def _obj_equal(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    return type(a) is type(b) and a == b


def test_broadcast_object_from_every_root(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    for root in range(size):
        for i, obj in enumerate(OBJECTS):
            mine = obj if rank == root else ("not the root's", rank, i)
            got = hvd.broadcast_object(mine, root_rank=root)
            assert _obj_equal(got, obj), f"broadcast_object #{i} from root {root}: got {str(got)[:100]}"
    got = hvd.broadcast_object({"default": "root"} if rank == 0 else None)
    assert got == {"default": "root"}


def test_allgather_object_various_sizes(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    def obj_of(r, i):
        # one rank sends a big object (> 1 MiB), others small or empty ones
        if (r + i) % size == 0:
            return {"rank": r, "blob": bytes([r % 256]) * (1_500_000 + r)}
        return OBJECTS[(r + i) % len(OBJECTS)]
    for i in range(3):
        got = hvd.allgather_object(obj_of(rank, i))
        assert isinstance(got, list) and len(got) == size
        for r in range(size):
            assert _obj_equal(got[r], obj_of(r, i)), f"allgather_object round {i}: entry of rank {r} differs"
    got = hvd.allgather_object(("x" * rank, rank), name="ago.named")
    assert got == [("x" * r, r) for r in range(size)]
    got = hvd.allgather_object(None)
    assert got == [None] * size


# ------------------------------------------------------------------ everything at once


def _is_none(value, what):
    assert value is None, f"{what}: non-root got {type(value).__name__}"


def test_every_collective_in_flight_at_once(hvd, comm, store):
    """Async calls of every kind enqueued together (fusable and not), synchronised in reverse."""
    size, rank = hvd.size(), hvd.rank()
    checks = []
    for i in range(3):
        dtype = DTYPES[(3 * i + 2) % len(DTYPES)]
        k = f"mixed.{i}"
        bi = [data(k + ".b", dtype, (5, 2), r) for r in range(size)]
        root = i % size
        checks.append((hvd.broadcast_async(bi[rank], root, name=k + ".b"), lambda o, bi=bi, root=root: assert_same(o, bi[root], "mixed broadcast")))
        ai = [data(k + ".ag", dtype, (r + i, 3), r) for r in range(size)]
        checks.append((hvd.allgather_async(ai[rank], name=k + ".ag"), lambda o, ai=ai: assert_same(o, np.concatenate(ai), "mixed allgather")))
        ri = make_rank_inputs(k + ".rs", "int64", (2 * size + i, 3), "Sum", "wide", size)
        s, c = share(2 * size + i, size, rank)
        checks.append((hvd.reducescatter_async(ri[rank], op=hvd.Sum, name=k + ".rs"), lambda o, ri=ri, s=s, c=c: check_result(o, [x[s : s + c] for x in ri], "Sum", True, what="mixed rs")))
        li = make_rank_inputs(k + ".ar", "int32", (13,), "Sum", "wide", size)
        checks.append((hvd.allreduce_async(li[rank], op=hvd.Sum, name=k + ".ar"), lambda o, li=li: check_result(o, li, "Sum", True, what="mixed allreduce")))
        ti = [data(k + ".a2a", dtype, (2 * size,), r) for r in range(size)]
        checks.append((hvd.alltoall_async(ti[rank], name=k + ".a2a"), lambda o, ti=ti: assert_same(o, np.concatenate([x[2 * rank : 2 * rank + 2] for x in ti]), "mixed alltoall")))
        gi = [data(k + ".g", dtype, (r,), r) for r in range(size)]
        checks.append((hvd.gather_async(gi[rank], root, name=k + ".g"), lambda o, gi=gi, root=root: assert_same(o, np.concatenate(gi), "mixed gather") if rank == root else _is_none(o, "mixed gather")))
    for handle, check in reversed(checks):
        check(hvd.synchronize(handle))
    hvd.barrier()
    gather_and_compare(comm, True, "mixed done")
