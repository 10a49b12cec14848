"""Process sets: every collective on sets of 1, 2 and 3 ranks against NumPy, sets in
flight concurrently with each other and with the global set (the same tensor names in
different sets), sets given at init, removal, and bad use raising on every rank involved.

Runs inside each MPI rank (see conftest.py in this folder for how to launch it). The
module fixture initialises horo with some sets given to init() and adds the others;
every rank runs every test in the same order, members of a set do the set's work,
the other ranks skip it. Roots are GLOBAL ranks that belong to the set.

Set layouts per world size (distinct rank lists; names are only for messages):
    np=1: given at init {one: [0]}
    np=2: given at init {zero: [0], one: [1]}, added {pair: [0, 1]}
    np=3: given at init {even: [0, 2], mid: [1]}, added {last: [2], all3: [0, 1, 2]}
    np=4: given at init {even: [0, 2], odd: [1, 3]}, added {solo: [3], trio: [1, 2, 3], pair01: [0, 1]}

`test_unnamed_*` (last in the file) is launched on its own by the driver (-k unnamed).
"""
import time

import numpy as np
import pytest
from mpi4py import MPI

from horo_reference import OPS, check_result, is_int, kinds_for, make_rank_inputs, must_be_exact, np_dtype
from rank_helpers import gather_and_compare, outcome_of

WORLD = MPI.COMM_WORLD.Get_size()
INIT_SETS = {
    1: {"one": [0]},
    2: {"zero": [0], "one": [1]},
    3: {"even": [0, 2], "mid": [1]},
    4: {"even": [0, 2], "odd": [1, 3]},
}.get(WORLD, {"even": list(range(0, WORLD, 2)), "odd": list(range(1, WORLD, 2))})
ADDED_SETS = {
    1: {},
    2: {"pair": [0, 1]},
    3: {"last": [2], "all3": [0, 1, 2]},
    4: {"solo": [3], "trio": [1, 2, 3], "pair01": [0, 1]},
}.get(WORLD, {"solo": [WORLD - 1], "trio": [1, 2, 3], "pair01": [0, 1]})

needs_two_ranks = pytest.mark.skipif(WORLD < 2, reason="needs at least two ranks")

AR_DTYPES = ["uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


# ------------------------------------------------------------------ fixtures and helpers


@pytest.fixture(scope="module")
def env(comm):
    """(horo, {name: ProcessSet}) with the INIT_SETS given to init() and the ADDED_SETS added."""
    import horo

    init_sets = {name: horo.ProcessSet(ranks) for name, ranks in INIT_SETS.items()}
    horo.init(process_sets=list(init_sets.values()))
    sets = dict(init_sets)
    for name, ranks in ADDED_SETS.items():
        sets[name] = horo.add_process_set(ranks)
    yield horo, sets
    if horo.is_initialized():
        horo.shutdown()


def member_sets(hvd, sets, with_global=True):
    """(name, set) of every set this rank belongs to, in one order shared by all ranks."""
    out = [("global", hvd.global_process_set)] if with_global else []
    out += [(name, ps) for name, ps in sorted(sets.items()) if ps.included()]
    return out


def data(key, dtype, shape, i):
    """Set member i's input for case `key` (no arithmetic done on it)."""
    kind = "wide" if is_int(np_dtype(dtype)) else "random"
    return make_rank_inputs((key, i), dtype, shape, "Sum", kind, 1)[0].reshape(shape)


def share(rows, n, i):
    """(start, count) of member i's rows: the first rows % n members get one more."""
    base, extra = divmod(rows, n)
    return i * base + min(i, extra), base + (1 if i < extra else 0)


def assert_same(result, expected, what):
    assert isinstance(result, np.ndarray), f"{what}: result is {type(result).__name__}, not an ndarray"
    expected = np.asarray(expected)
    assert result.dtype == expected.dtype, f"{what}: dtype {result.dtype} != {expected.dtype}"
    assert result.shape == expected.shape, f"{what}: shape {result.shape} != {expected.shape}"
    assert result.tobytes() == expected.tobytes(), f"{what}: differs from NumPy:\n got {result!r}\n expected {expected!r}"


def done(comm, what):
    """Every rank reached the end of the test (and agrees on what it did)."""
    gather_and_compare(comm, what, "end of test")


def expect_raise_on(comm, members, exc_type, fn, must_contain=(), what=""):
    """Members call fn and must each raise exc_type whose message contains must_contain;
    the other ranks only take part in the report. Returns this rank's exception (or None)."""
    rank = comm.Get_rank()
    if rank in members:
        name, msg, exc = outcome_of(fn)
        ok = isinstance(exc, exc_type)
        missing = [s for s in must_contain if ok and str(s).lower() not in msg.lower()]
        mine = (True, ok, name, msg[:400], missing)
    else:
        exc, mine = None, (False, True, None, "", [])
    problems = []
    for r, (member, ok, name, msg, missing) in enumerate(comm.allgather(mine)):
        if not member:
            continue
        if not ok:
            problems.append(f"  rank {r}: expected {exc_type.__name__}, got {name or 'no exception'}: {msg}")
        elif missing:
            problems.append(f"  rank {r}: message lacks {missing}: {msg}")
    if problems:
        raise AssertionError(f"{what}: not raised as specified on every rank involved:\n" + "\n".join(problems))
    return exc


# ------------------------------------------------------------------ registration


def test_sets_given_at_init_and_added_are_registered_alike_on_every_rank(env, comm):
    hvd, sets = env
    rank = hvd.rank()
    assert hvd.size() == WORLD
    g = hvd.global_process_set
    assert g.process_set_id == 0 and g.ranks == list(range(WORLD)) and g.size() == WORLD
    assert g.rank() == rank and g.included()
    ids = {}
    for name, ps in sorted(sets.items()):
        expected = sorted(INIT_SETS.get(name, ADDED_SETS.get(name, [])))
        assert ps.ranks == expected, f"{name}: ranks {ps.ranks} != {expected}"
        assert isinstance(ps.process_set_id, int) and ps.process_set_id > 0, f"{name}: id {ps.process_set_id}"
        assert ps.size() == len(expected)
        assert ps.included() == (rank in expected), name
        if rank in expected:
            assert ps.rank() == expected.index(rank), name
        ids[name] = ps.process_set_id
    assert len(set(ids.values())) == len(ids), f"process set ids are not distinct: {ids}"
    gather_and_compare(comm, sorted(ids.items()), "process set ids")


# ------------------------------------------------------------------ every collective on every set, against NumPy


@pytest.mark.parametrize("op", OPS)
def test_allreduce_on_every_set(env, comm, op):
    """The same tensor names on every set; sync, in place, async and grouped."""
    hvd, sets = env
    count = 0
    for sname, ps in member_sets(hvd, sets):
        n, me = ps.size(), ps.rank()
        pending = []
        for dtype in AR_DTYPES:
            for kind in kinds_for(dtype):
                key = ("ar", sname, op, dtype, kind)
                inputs = make_rank_inputs(key, dtype, (7, 3), op, kind, n)
                exact = must_be_exact(dtype, op, kind, n)
                name = f"ps.ar.{op}.{dtype}.{kind}"
                x = inputs[me].copy()
                out = hvd.allreduce(x, op=getattr(hvd, op), name=name, process_set=ps)
                check_result(out, inputs, op, exact, what=f"set {sname} {name}")
                assert x.tobytes() == inputs[me].tobytes(), f"set {sname} {name}: input modified"
                y = inputs[me].copy()
                assert hvd.allreduce_(y, op=getattr(hvd, op), name=name + ".inplace", process_set=ps) is y
                check_result(y, inputs, op, exact, what=f"set {sname} {name} in place")
                akey = key + ("async",)
                ainputs = make_rank_inputs(akey, dtype, (5,), op, kind, n)
                h = hvd.allreduce_async(ainputs[me], op=getattr(hvd, op), name=name + ".async", process_set=ps)
                pending.append((h, ainputs, must_be_exact(dtype, op, kind, n), f"set {sname} {name}.async"))
                count += 1
        for h, ainputs, exact, what in reversed(pending):
            check_result(hvd.synchronize(h), ainputs, op, exact, what=what)
        group = [make_rank_inputs(("grouped", sname, op, i), "float64", (i + 1,), op, "exact", n) for i in range(4)]
        outs = hvd.grouped_allreduce([g[me] for g in group], op=getattr(hvd, op), name=f"ps.gar.{op}", process_set=ps)
        for i, (out, g) in enumerate(zip(outs, group)):
            check_result(out, g, op, must_be_exact("float64", op, "exact", n), what=f"set {sname} grouped #{i}")
    done(comm, True)


def test_allreduce_average_divides_by_the_set_size_and_scales(env, comm):
    hvd, sets = env
    for sname, ps in member_sets(hvd, sets):
        n, me = ps.size(), ps.rank()
        x = np.full(4, float(ps.ranks[me] + 1), dtype=np.float64)
        out = hvd.allreduce(x, name="ps.avg", process_set=ps)  # default op: Average
        expected = np.full(4, sum(r + 1 for r in ps.ranks) / n)
        assert np.allclose(out, expected, rtol=0, atol=1e-12), f"set {sname}: Average {out} != {expected}"
        out = hvd.allreduce(x, op=hvd.Sum, name="ps.scaled", process_set=ps, prescale_factor=2.0, postscale_factor=0.5)
        assert np.array_equal(out, np.full(4, float(sum(r + 1 for r in ps.ranks)))), f"set {sname}: scaled Sum {out}"
    done(comm, True)


@pytest.mark.parametrize("dtype", ["int8", "int64", "bfloat16", "float32"])
def test_broadcast_from_every_member_root(env, comm, dtype):
    hvd, sets = env
    for sname, ps in member_sets(hvd, sets):
        n, me = ps.size(), ps.rank()
        pending = []
        for root in ps.ranks:  # global ranks
            ridx = ps.ranks.index(root)
            for shape in [(), (0,), (6,), (3, 4)]:
                key = ("bc", sname, dtype, root, shape)
                inputs = [data(key, dtype, shape, i) for i in range(n)]
                name = f"ps.bc.{dtype}.{root}.{shape}"
                x = inputs[me].copy()
                out = hvd.broadcast(x, root, name=name, process_set=ps)
                assert_same(out, inputs[ridx], f"set {sname} {name}")
                assert x.tobytes() == inputs[me].tobytes(), f"set {sname} {name}: input modified"
                y = inputs[me].copy()
                assert hvd.broadcast_(y, root_rank=root, name=name + ".inplace", process_set=ps) is y
                assert_same(y, inputs[ridx], f"set {sname} {name} in place")
                pending.append((hvd.broadcast_async(inputs[me], root, name=name + ".async", process_set=ps), inputs[ridx], name))
        for h, expected, name in reversed(pending):
            assert_same(hvd.synchronize(h), expected, f"set {sname} {name} async")
    done(comm, True)


ROWS = {
    "ragged": lambda n: [i + 1 for i in range(n)],
    "last_empty": lambda n: [0 if i == n - 1 else 2 * i + 1 for i in range(n)],
    "all_empty": lambda n: [0] * n,
}


@pytest.mark.parametrize("dtype", ["uint8", "int32", "float16", "float64"])
def test_allgather_ragged_on_every_set(env, comm, dtype):
    hvd, sets = env
    for sname, ps in member_sets(hvd, sets):
        n, me = ps.size(), ps.rank()
        pending = []
        for pattern, rows_of in ROWS.items():
            rows = rows_of(n)
            for trailing in [(), (3,), (2, 0)]:
                key = ("ag", sname, dtype, pattern, trailing)
                inputs = [data(key, dtype, (rows[i], *trailing), i) for i in range(n)]
                name = f"ps.ag.{dtype}.{pattern}.{trailing}"
                out = hvd.allgather(inputs[me], name=name, process_set=ps)
                assert_same(out, np.concatenate(inputs), f"set {sname} {name}")
                pending.append((hvd.allgather_async(inputs[me], name=name + ".async", process_set=ps), np.concatenate(inputs), name))
        for h, expected, name in reversed(pending):
            assert_same(hvd.synchronize(h), expected, f"set {sname} {name} async")
        key = ("ag.grouped", sname, dtype)
        group = [[data((key, j), dtype, (i + j, 2), i) for i in range(n)] for j in range(3)]
        outs = hvd.grouped_allgather([g[me] for g in group], name=f"ps.gag.{dtype}", process_set=ps)
        for j, (out, g) in enumerate(zip(outs, group)):
            assert_same(out, np.concatenate(g), f"set {sname} grouped allgather #{j}")
    done(comm, True)


@pytest.mark.parametrize("dtype", ["int8", "float32", "bfloat16"])
def test_alltoall_with_splits_sized_to_the_set(env, comm, dtype):
    hvd, sets = env
    for sname, ps in member_sets(hvd, sets):
        n, me = ps.size(), ps.rank()
        patterns = {
            "equal": lambda i: [2] * n,
            "varied": lambda i: [(i + 2 * j) % 4 for j in range(n)],
            "to_first": lambda i: [3 if j == 0 else 0 for j in range(n)],
            "nothing": lambda i: [0] * n,
        }
        for pname, splits_of in patterns.items():
            splits = [splits_of(i) for i in range(n)]
            for trailing in [(), (3,)]:
                key = ("a2a", sname, dtype, pname, trailing)
                name = f"ps.a2a.{dtype}.{pname}.{trailing}"
                inputs = [data(key, dtype, (sum(splits[i]), *trailing), i) for i in range(n)]
                offsets = [np.concatenate([[0], np.cumsum(s)]).astype(int) for s in splits]
                expected = np.concatenate([inputs[j][offsets[j][me] : offsets[j][me + 1]] for j in range(n)])
                out, received = hvd.alltoall(inputs[me], splits=splits[me], name=name, process_set=ps)
                assert_same(out, expected, f"set {sname} {name}")
                assert [int(v) for v in received] == [splits[j][me] for j in range(n)], f"set {sname} {name}: received {received}"
        for rows in sorted({0, n, 2 * n, 3 * n}):  # without splits: equal parts (Horovod)
            key = ("a2a.nosplits", sname, dtype, rows)
            inputs = [data(key, dtype, (rows, 2), i) for i in range(n)]
            s, c = share(rows, n, me)
            name = f"ps.a2a.{dtype}.nosplits.{rows}"
            out = hvd.synchronize(hvd.alltoall_async(inputs[me], name=name, process_set=ps))
            assert_same(out, np.concatenate([x[s : s + c] for x in inputs]), f"set {sname} {name}")
    done(comm, True)


@pytest.mark.parametrize("op", OPS)
def test_reducescatter_split_over_the_set_size(env, comm, op):
    hvd, sets = env
    for sname, ps in member_sets(hvd, sets):
        n, me = ps.size(), ps.rank()
        pending = []
        for dtype in ("int32", "float32", "float64"):
            kind = kinds_for(dtype)[0]
            for rows in sorted({0, 1, n, 2 * n + 1, 3 * n - 1}):
                key = ("rs", sname, op, dtype, rows)
                name = f"ps.rs.{op}.{dtype}.{rows}"
                inputs = make_rank_inputs(key, dtype, (rows, 3), op, kind, n)
                s, c = share(rows, n, me)
                exact = must_be_exact(dtype, op, kind, n)
                out = hvd.reducescatter(inputs[me], op=getattr(hvd, op), name=name, process_set=ps)
                check_result(out, [x[s : s + c] for x in inputs], op, exact, what=f"set {sname} {name}")
                h = hvd.reducescatter_async(inputs[me], op=getattr(hvd, op), name=name + ".async", process_set=ps)
                pending.append((h, [x[s : s + c] for x in inputs], exact, name))
        for h, expected_inputs, exact, name in reversed(pending):
            check_result(hvd.synchronize(h), expected_inputs, op, exact, what=f"set {sname} {name} async")
        group = [make_rank_inputs(("grs", sname, op, j), "int64", (n + j, 2), op, "wide", n) for j in range(3)]
        outs = hvd.grouped_reducescatter([g[me] for g in group], op=getattr(hvd, op), name=f"ps.grs.{op}", process_set=ps)
        for j, (out, g) in enumerate(zip(outs, group)):
            s, c = share(n + j, n, me)
            check_result(out, [x[s : s + c] for x in g], op, True, what=f"set {sname} grouped reducescatter #{j}")
    done(comm, True)


def test_gather_scatter_reduce_to_and_from_every_member_root(env, comm):
    hvd, sets = env
    rank = hvd.rank()
    for sname, ps in member_sets(hvd, sets):
        n, me = ps.size(), ps.rank()
        for root in ps.ranks:
            ridx = ps.ranks.index(root)
            # gather, ragged
            key = ("gather", sname, root)
            inputs = [data(key, "float32", (i + 1, 2), i) for i in range(n)]
            for call in range(2):  # the second from the response cache (on shared memory, its inputs preloaded)
                out = hvd.gather(inputs[me] + call, root_rank=root, name=f"ps.gather.{root}", process_set=ps)
                if rank == root:
                    assert_same(out, np.concatenate(inputs) + call, f"set {sname} gather to {root}, call {call}")
                else:
                    assert out is None, f"set {sname} gather to {root}: non-root rank {rank} got {type(out).__name__}"
            # scatter, uneven
            rows = 2 * n + 1
            key = ("scatter", sname, root)
            inputs = [data(key, "int64", (rows, 3), i) for i in range(n)]
            s, c = share(rows, n, me)
            out = hvd.scatter(inputs[me], root_rank=root, name=f"ps.scatter.{root}", process_set=ps)
            assert_same(out, inputs[ridx][s : s + c], f"set {sname} scatter from {root}")
            # reduce, every op
            for op in OPS:
                for dtype in ("int32", "float64"):
                    kind = kinds_for(dtype)[0]
                    key = ("reduce", sname, root, op, dtype)
                    inputs = make_rank_inputs(key, dtype, (9,), op, kind, n)
                    name = f"ps.reduce.{root}.{op}.{dtype}"
                    out = hvd.reduce(inputs[me], root_rank=root, op=getattr(hvd, op), name=name, process_set=ps)
                    if rank == root:
                        check_result(out, inputs, op, must_be_exact(dtype, op, kind, n), what=f"set {sname} {name}")
                    else:
                        assert out is None, f"set {sname} {name}: non-root rank {rank} got {type(out).__name__}"
            # async forms, all three in flight at once
            gi = [data(("ga", sname, root), "int8", (n - i, 2), i) for i in range(n)]
            si = [data(("sa", sname, root), "int8", (n + 2, 2), i) for i in range(n)]
            ri = make_rank_inputs(("ra", sname, root), "int64", (4,), "Sum", "wide", n)
            hg = hvd.gather_async(gi[me], root, name=f"ps.gather.async.{root}", process_set=ps)
            hs = hvd.scatter_async(si[me], root, name=f"ps.scatter.async.{root}", process_set=ps)
            hr = hvd.reduce_async(ri[me], root, op=hvd.Sum, name=f"ps.reduce.async.{root}", process_set=ps)
            out = hvd.synchronize(hr)
            if rank == root:
                check_result(out, ri, "Sum", True, what=f"set {sname} reduce_async to {root}")
            else:
                assert out is None
            s, c = share(n + 2, n, me)
            assert_same(hvd.synchronize(hs), si[ridx][s : s + c], f"set {sname} scatter_async from {root}")
            out = hvd.synchronize(hg)
            if rank == root:
                assert_same(out, np.concatenate(gi), f"set {sname} gather_async to {root}")
            else:
                assert out is None
    done(comm, True)


RING_MIN_BYTES = 262144  # contributions either side of the ring threshold


def test_large_tensors_on_every_set_at_once(env, comm):
    """Above the ring threshold on every set and the global set at once (ring or MPI
    algorithms on each set's communicator, per the launch's settings)."""
    hvd, sets = env
    rank = hvd.rank()
    checks = []
    for sname, ps in member_sets(hvd, sets):
        n, me = ps.size(), ps.rank()
        ar = make_rank_inputs(("big.ar", sname), "int32", (RING_MIN_BYTES // 4 + 3,), "Sum", "wide", n)
        checks.append((hvd.allreduce_async(ar[me], op=hvd.Sum, name="big.ar", process_set=ps),
                       lambda o, ar=ar, sname=sname: check_result(o, ar, "Sum", True, what=f"set {sname} big allreduce")))
        rows = [RING_MIN_BYTES // 8 // 3 + 7 * i for i in range(n)]
        ag = [data(("big.ag", sname), "float64", (rows[i], 3), i) for i in range(n)]
        checks.append((hvd.allgather_async(ag[me], name="big.ag", process_set=ps),
                       lambda o, ag=ag, sname=sname: assert_same(o, np.concatenate(ag), f"set {sname} big allgather")))
        rrows = RING_MIN_BYTES // 8 + 2 * n + 1
        rs = make_rank_inputs(("big.rs", sname), "int64", (rrows,), "Sum", "wide", n)
        s, c = share(rrows, n, me)
        checks.append((hvd.reducescatter_async(rs[me], op=hvd.Sum, name="big.rs", process_set=ps),
                       lambda o, rs=rs, s=s, c=c, sname=sname: check_result(o, [x[s : s + c] for x in rs], "Sum", True, what=f"set {sname} big reducescatter")))
        bc = [data(("big.bc", sname), "uint8", (3 * RING_MIN_BYTES + 1,), i) for i in range(n)]
        checks.append((hvd.broadcast_async(bc[me], ps.ranks[-1], name="big.bc", process_set=ps),
                       lambda o, bc=bc, sname=sname: assert_same(o, bc[-1], f"set {sname} big broadcast")))
        a2 = [data(("big.a2", sname), "float32", (RING_MIN_BYTES // 4 + i,), i) for i in range(n)]
        splits = [[share(a2[i].shape[0], n, j)[1] for j in range(n)] for i in range(n)]
        off = [np.concatenate([[0], np.cumsum(sp)]).astype(int) for sp in splits]
        expected = np.concatenate([a2[j][off[j][me] : off[j][me + 1]] for j in range(n)])
        checks.append((hvd.alltoall_async(a2[me], splits=splits[me], name="big.a2a", process_set=ps),
                       lambda o, e=expected, sname=sname: assert_same(o[0], e, f"set {sname} big alltoall")))
    for h, check in reversed(checks):
        check(hvd.synchronize(h))
    done(comm, True)


def test_barrier_and_objects_on_every_set(env, comm):
    hvd, sets = env
    rank = hvd.rank()
    for sname, ps in member_sets(hvd, sets, with_global=False):
        hvd.barrier(name=f"ps.barrier.{sname}", process_set=ps)
        for root in ps.ranks:
            obj = {"set": sname, "root": root, "blob": bytes([root]) * (1000 * root + 3)}
            got = hvd.broadcast_object(obj if rank == root else None, root_rank=root, name=f"ps.bo.{root}", process_set=ps)
            assert got == obj, f"set {sname}: broadcast_object from {root}"
        got = hvd.allgather_object(("member", rank, "x" * rank), name="ps.ago", process_set=ps)
        assert got == [("member", r, "x" * r) for r in ps.ranks], f"set {sname}: allgather_object {got}"
    done(comm, True)


def test_a_set_barrier_waits_for_its_slowest_member_only(env, comm):
    hvd, sets = env
    rank = hvd.rank()
    comm.Barrier()
    for sname, ps in sorted(sets.items()):
        slow = ps.ranks[-1]
        entered = left = None
        if ps.included():
            if rank == slow:
                time.sleep(0.3)
            entered = time.time()
            hvd.barrier(name=f"ps.slow.{sname}", process_set=ps)
            left = time.time()
        everyone = comm.allgather((entered, left))
        t_slow = everyone[slow][0]
        for r in ps.ranks:
            assert everyone[r][1] >= t_slow - 0.01, f"set {sname}: rank {r} left the barrier before {slow} entered"
    done(comm, True)


# ------------------------------------------------------------------ concurrency


def _concurrent_jobs(hvd, sets, round_no):
    """(label, submit() -> handle, check(result)) for every set this rank is in, global first;
    the same names in every set."""
    rank = hvd.rank()
    jobs = []
    for sname, ps in member_sets(hvd, sets):
        n, me = ps.size(), ps.rank()
        k = (sname, round_no)
        ar = make_rank_inputs(("c.ar", k), "int64", (33,), "Sum", "wide", n)
        av = make_rank_inputs(("c.av", k), "float64", (5, 2), "Average", "exact", n)
        ag = [data(("c.ag", k), "float32", (i + round_no, 3), i) for i in range(n)]
        root = ps.ranks[(round_no + 1) % n]
        bc = [data(("c.bc", k), "uint8", (17,), i) for i in range(n)]
        rows = 2 * n + round_no
        rs = make_rank_inputs(("c.rs", k), "int32", (rows, 2), "Max", "wide", n)
        s, c = share(rows, n, me)
        splits = [[(i + j + round_no) % 3 for j in range(n)] for i in range(n)]
        a2 = [data(("c.a2", k), "int8", (sum(splits[i]),), i) for i in range(n)]
        off = [np.concatenate([[0], np.cumsum(sp)]).astype(int) for sp in splits]
        a2_expected = np.concatenate([a2[j][off[j][me] : off[j][me + 1]] for j in range(n)])
        gi = [data(("c.g", k), "int8", (i + 1,), i) for i in range(n)]
        groot = ps.ranks[-1]
        for j in range(3):  # several small allreduces per set: fused within the set
            xj = make_rank_inputs(("c.arj", k, j), "float32", (j + 2,), "Max", "random", n)
            jobs.append((f"{sname} allreduce #{j}",
                         lambda ps=ps, x=xj[me], j=j: hvd.allreduce_async(x, op=hvd.Max, name=f"conc.ar.{j}", process_set=ps),
                         lambda o, xj=xj, sname=sname, j=j: check_result(o, xj, "Max", True, what=f"set {sname} concurrent allreduce #{j}")))
        # one name, a different collective on the global set than on the other sets
        mx = [data(("c.mixed", k), "int32", (n + 1, 2), i) for i in range(n)]
        if sname == "global":
            jobs.append((f"{sname} mixed", lambda ps=ps, x=mx[me]: hvd.broadcast_async(x, 0, name="conc.mixed", process_set=ps),
                         lambda o, mx=mx: assert_same(o, mx[0], "global concurrent conc.mixed broadcast")))
        else:
            jobs.append((f"{sname} mixed", lambda ps=ps, x=mx[me]: hvd.allgather_async(x, name="conc.mixed", process_set=ps),
                         lambda o, mx=mx, sname=sname: assert_same(o, np.concatenate(mx), f"set {sname} concurrent conc.mixed allgather")))
        jobs += [
            (f"{sname} allreduce", lambda ps=ps, x=ar[me]: hvd.allreduce_async(x, op=hvd.Sum, name="conc.ar", process_set=ps),
             lambda o, ar=ar, sname=sname: check_result(o, ar, "Sum", True, what=f"set {sname} concurrent allreduce")),
            (f"{sname} average", lambda ps=ps, x=av[me]: hvd.allreduce_async(x, op=hvd.Average, name="conc.av", process_set=ps),
             lambda o, av=av, sname=sname, n=n: check_result(o, av, "Average", must_be_exact("float64", "Average", "exact", n), what=f"set {sname} concurrent average")),
            (f"{sname} allgather", lambda ps=ps, x=ag[me]: hvd.allgather_async(x, name="conc.ag", process_set=ps),
             lambda o, ag=ag, sname=sname: assert_same(o, np.concatenate(ag), f"set {sname} concurrent allgather")),
            (f"{sname} broadcast", lambda ps=ps, x=bc[me], root=root: hvd.broadcast_async(x, root, name="conc.bc", process_set=ps),
             lambda o, bc=bc, ridx=ps.ranks.index(root), sname=sname: assert_same(o, bc[ridx], f"set {sname} concurrent broadcast")),
            (f"{sname} reducescatter", lambda ps=ps, x=rs[me]: hvd.reducescatter_async(x, op=hvd.Max, name="conc.rs", process_set=ps),
             lambda o, rs=rs, s=s, c=c, sname=sname: check_result(o, [x[s : s + c] for x in rs], "Max", True, what=f"set {sname} concurrent reducescatter")),
            (f"{sname} alltoall", lambda ps=ps, x=a2[me], sp=splits[me]: hvd.alltoall_async(x, splits=sp, name="conc.a2a", process_set=ps),
             lambda o, e=a2_expected, sname=sname: assert_same(o[0], e, f"set {sname} concurrent alltoall")),
            (f"{sname} gather", lambda ps=ps, x=gi[me], groot=groot: hvd.gather_async(x, groot, name="conc.gather", process_set=ps),
             lambda o, gi=gi, groot=groot, sname=sname: assert_same(o, np.concatenate(gi), f"set {sname} concurrent gather")
             if rank == groot else (o is None) or pytest.fail(f"set {sname} concurrent gather: non-root got {type(o).__name__}")),
        ]
    return jobs


def test_async_collectives_on_every_set_and_the_global_set_in_flight_at_once(env, comm):
    """Every kind of collective on every set this rank is in and on the global set, all
    with the same names, submitted in a different order on every rank and synchronised
    in another; the names are reused over the rounds (response cache)."""
    hvd, sets = env
    rank = hvd.rank()
    total = 0
    for round_no in range(4):
        jobs = _concurrent_jobs(hvd, sets, round_no)
        submit_order = np.random.default_rng([round_no, rank, 11]).permutation(len(jobs))
        sync_order = np.random.default_rng([round_no, rank, 12]).permutation(len(jobs))
        comm.Barrier()
        handles = {}
        for j in submit_order:
            handles[j] = jobs[j][1]()
        for j in sync_order:
            jobs[j][2](hvd.synchronize(handles[j]))
        total += len(jobs)
    done(comm, True)


@needs_two_ranks
def test_a_held_collective_on_one_set_does_not_block_the_global_set_or_other_sets(env, comm):
    """A member of set H holds back its part of an allreduce on H while everything else
    (the global set, the other sets) completes; then it submits and H's allreduce completes."""
    hvd, sets = env
    rank = hvd.rank()
    held_name, held = max(((n, ps) for n, ps in sets.items() if ps.size() >= 2), key=lambda t: (t[1].size(), t[0]))
    late = held.ranks[-1]
    inputs = make_rank_inputs(("held", held_name), "int32", (8,), "Sum", "wide", held.size()) if held.included() else None
    handle = None
    if held.included() and rank != late:
        handle = hvd.allreduce_async(inputs[held.ranks.index(rank)], op=hvd.Sum, name="held.ar", process_set=held)
    comm.Barrier()
    # meanwhile: the global set and every set this rank is in (H included, under other names)
    for sname, ps in member_sets(hvd, sets):
        n, me = ps.size(), ps.rank()
        x = make_rank_inputs(("meanwhile", sname), "int64", (6,), "Sum", "wide", n)
        out = hvd.allreduce(x[me], op=hvd.Sum, name="meanwhile.ar", process_set=ps)
        check_result(out, x, "Sum", True, what=f"set {sname} allreduce while {held_name}'s held.ar pends")
        g = [data(("meanwhile.ag", sname), "int8", (i,), i) for i in range(n)]
        assert_same(hvd.allgather(g[me], name="meanwhile.ag", process_set=ps), np.concatenate(g), f"set {sname} allgather")
    if handle is not None:
        assert not hvd.poll(handle), f"held.ar on {held_name} completed before rank {late} submitted it"
    comm.Barrier()
    if rank == late:
        handle = hvd.allreduce_async(inputs[held.ranks.index(rank)], op=hvd.Sum, name="held.ar", process_set=held)
    if handle is not None:
        check_result(hvd.synchronize(handle), inputs, "Sum", True, what=f"held.ar on {held_name}")
    done(comm, True)


@needs_two_ranks
def test_a_held_global_collective_does_not_block_the_sets(env, comm):
    """The last rank holds back a global allreduce; every set (including sets with the last
    rank in them) keeps working; then the global allreduce completes."""
    hvd, sets = env
    rank, size = hvd.rank(), hvd.size()
    inputs = make_rank_inputs("held.global", "float64", (10,), "Sum", "exact", size)
    handle = None
    if rank != size - 1:
        handle = hvd.allreduce_async(inputs[rank], op=hvd.Sum, name="held.global")
    comm.Barrier()
    for sname, ps in member_sets(hvd, sets, with_global=False):
        n, me = ps.size(), ps.rank()
        x = make_rank_inputs(("meanwhile2", sname), "int32", (6,), "Max", "wide", n)
        check_result(hvd.allreduce(x[me], op=hvd.Max, name="held.global", process_set=ps), x, "Max", True,
                     what=f"set {sname}: the global set's pending tensor name used on the set")
        b = [data(("mb", sname), "float32", (3,), i) for i in range(n)]
        assert_same(hvd.broadcast(b[me], ps.ranks[0], name="meanwhile2.bc", process_set=ps), b[0], f"set {sname} broadcast")
    if handle is not None:
        assert not hvd.poll(handle), f"the global held.global completed before rank {size - 1} submitted it"
    comm.Barrier()
    if rank == size - 1:
        handle = hvd.allreduce_async(inputs[rank], op=hvd.Sum, name="held.global")
    check_result(hvd.synchronize(handle), inputs, "Sum", True, what="held.global")
    done(comm, True)


# ------------------------------------------------------------------ bad use


def _entries(hvd):
    """Every collective entry point called on a process set: (label, fn(x, name, ps))."""
    return {
        "allreduce": lambda x, name, ps: hvd.allreduce(x, op=hvd.Sum, name=name, process_set=ps),
        "allreduce_": lambda x, name, ps: hvd.allreduce_(x, op=hvd.Sum, name=name, process_set=ps),
        "allreduce_async": lambda x, name, ps: hvd.synchronize(hvd.allreduce_async(x, name=name, process_set=ps)),
        "grouped_allreduce": lambda x, name, ps: hvd.grouped_allreduce([x, x], name=name, process_set=ps),
        "broadcast": lambda x, name, ps: hvd.broadcast(x, ps.ranks[0], name=name, process_set=ps),
        "broadcast_": lambda x, name, ps: hvd.broadcast_(x, ps.ranks[0], name=name, process_set=ps),
        "broadcast_async": lambda x, name, ps: hvd.synchronize(hvd.broadcast_async(x, ps.ranks[0], name=name, process_set=ps)),
        "allgather": lambda x, name, ps: hvd.allgather(x, name=name, process_set=ps),
        "grouped_allgather": lambda x, name, ps: hvd.grouped_allgather([x], name=name, process_set=ps),
        "alltoall": lambda x, name, ps: hvd.alltoall(x, name=name, process_set=ps),
        "alltoall_splits": lambda x, name, ps: hvd.alltoall(x, splits=[0] * ps.size(), name=name, process_set=ps),
        "reducescatter": lambda x, name, ps: hvd.reducescatter(x, op=hvd.Sum, name=name, process_set=ps),
        "grouped_reducescatter": lambda x, name, ps: hvd.grouped_reducescatter([x], name=name, process_set=ps),
        "gather": lambda x, name, ps: hvd.gather(x, ps.ranks[0], name=name, process_set=ps),
        "scatter": lambda x, name, ps: hvd.scatter(x, ps.ranks[0], name=name, process_set=ps),
        "reduce": lambda x, name, ps: hvd.reduce(x, ps.ranks[0], op=hvd.Sum, name=name, process_set=ps),
        "barrier": lambda x, name, ps: hvd.barrier(name=name, process_set=ps),
        "broadcast_object": lambda x, name, ps: hvd.broadcast_object(x, ps.ranks[0], name=name, process_set=ps),
        "allgather_object": lambda x, name, ps: hvd.allgather_object(x, name=name, process_set=ps),
    }


@needs_two_ranks
def test_a_rank_outside_a_set_calling_any_collective_on_it_gets_value_error_naming_the_tensor(env, comm):
    hvd, sets = env
    rank = hvd.rank()
    checked = 0
    for sname, ps in sorted(sets.items()):
        outsiders = [r for r in range(WORLD) if r not in ps.ranks]
        for entry, fn in _entries(hvd).items():
            name = f"nonmember.{sname}.{entry}"
            x = np.arange(6, dtype=np.float32)
            expect_raise_on(comm, outsiders, ValueError, lambda: fn(x, name, ps), (name,), what=f"rank outside {sname}: {entry}")
            checked += len(outsiders)
    # nothing reached the engine: the members' next collective on the set is unaffected
    for sname, ps in member_sets(hvd, sets):
        x = make_rank_inputs(("after.nonmember", sname), "int32", (4,), "Sum", "wide", ps.size())
        check_result(hvd.allreduce(x[ps.rank()], op=hvd.Sum, name="after.nonmember", process_set=ps), x, "Sum", True,
                     what=f"set {sname} after the outsiders' calls")
    done(comm, True)


@pytest.mark.parametrize("entry", ["broadcast", "broadcast_async", "gather", "scatter", "reduce"])
def test_a_root_outside_the_set_raises_horo_error_on_every_member_naming_the_root(env, comm, entry):
    hvd, sets = env
    for sname, ps in sorted(sets.items()):
        outside = [r for r in range(WORLD) if r not in ps.ranks][:1] + [WORLD, -1]
        for root in outside:
            name = f"badroot.{sname}.{entry}.{root}"
            x = np.arange(2 * ps.size(), dtype=np.int64)

            def call():
                if entry == "broadcast":
                    return hvd.broadcast(x, root, name=name, process_set=ps)
                if entry == "broadcast_async":
                    return hvd.synchronize(hvd.broadcast_async(x, root, name=name, process_set=ps))
                if entry == "gather":
                    return hvd.gather(x, root_rank=root, name=name, process_set=ps)
                if entry == "scatter":
                    return hvd.scatter(x, root_rank=root, name=name, process_set=ps)
                return hvd.reduce(x, root_rank=root, op=hvd.Sum, name=name, process_set=ps)

            exc = expect_raise_on(comm, ps.ranks, hvd.HoroError, call, (name,), what=f"set {sname} {entry} root {root}")
            # the root the caller passed (a global rank) is named, not an index inside the set
            ok = exc is None or f"root rank {root}" in str(exc) or f"root {root}" in str(exc) or f"root_rank {root}" in str(exc)
            bad = [(r, m) for r, (o, m) in enumerate(comm.allgather((ok, str(exc)[:300]))) if not o]
            assert not bad, f"set {sname} {entry}: the error should name root {root}: {bad}"
    # the sets still work
    for sname, ps in member_sets(hvd, sets):
        x = [data(("after.badroot", sname), "float32", (3,), i) for i in range(ps.size())]
        assert_same(hvd.broadcast(x[ps.rank()], ps.ranks[-1], name=f"after.badroot.{entry}", process_set=ps), x[-1], sname)
    done(comm, True)


@needs_two_ranks
@pytest.mark.parametrize("how", ["one_rank_differs", "different_lengths", "every_rank_differs"])
def test_mismatched_rank_lists_in_add_process_set_raise_on_every_rank(env, comm, how):
    hvd, sets = env
    rank, size = hvd.rank(), hvd.size()
    if how == "one_rank_differs":
        mine = [0] if rank == size - 1 else [0, size - 1]
    elif how == "different_lengths":
        mine = list(range(size)) if rank == 0 else list(range(size - 1)) if size > 2 else [1]
    else:
        mine = [rank]
    ps = hvd.ProcessSet(mine)
    expect_raise_on(comm, range(size), hvd.HoroError, lambda: hvd.add_process_set(ps), ("add_process_set",), what=how)
    assert ps.process_set_id is None, f"{how}: a failed add left id {ps.process_set_id}"
    with pytest.raises(ValueError):
        hvd.allreduce(np.zeros(2), name=f"mismatch.{how}", process_set=ps)
    # the engine recovers: a consistent add works and the set computes
    ok = hvd.add_process_set([0, size - 1])
    if ok.included():
        x = make_rank_inputs(("after.mismatch", how), "int64", (3,), "Sum", "wide", 2)
        check_result(hvd.allreduce(x[ok.rank()], op=hvd.Sum, name="after.mismatch", process_set=ok), x, "Sum", True, what=how)
    hvd.remove_process_set(ok)
    done(comm, True)


@pytest.mark.parametrize("ranks_of", ["world_size", "negative", "far_out", "duplicate", "empty"])
def test_invalid_ranks_in_add_process_set_raise_on_every_rank(env, comm, ranks_of):
    hvd, sets = env
    size = hvd.size()
    bad = {"world_size": [0, size], "negative": [-1], "far_out": [size + 5], "duplicate": [0, 0], "empty": []}[ranks_of]
    ps = hvd.ProcessSet(bad)
    expect_raise_on(comm, range(size), hvd.HoroError, lambda: hvd.add_process_set(ps), ("add_process_set",), what=f"ranks {bad}")
    assert ps.process_set_id is None
    # still usable afterwards
    x = make_rank_inputs(("after.invalid", ranks_of), "int32", (5,), "Sum", "wide", size)
    check_result(hvd.allreduce(x[hvd.rank()], op=hvd.Sum, name=f"after.invalid.{ranks_of}"), x, "Sum", True, what=ranks_of)
    done(comm, True)


def test_a_removed_set_raises_value_error_and_its_ranks_can_form_a_new_set(env, comm):
    hvd, sets = env
    rank, size = hvd.rank(), hvd.size()
    members = sorted({0, size - 1})
    ps = hvd.add_process_set(members)
    old_id = ps.process_set_id
    if ps.included():
        x = make_rank_inputs("before.remove", "int64", (4,), "Sum", "wide", ps.size())
        check_result(hvd.allreduce(x[ps.rank()], op=hvd.Sum, name="rm.x", process_set=ps), x, "Sum", True, what="before remove")
    hvd.remove_process_set(ps)
    assert ps.process_set_id is None
    for entry, fn in _entries(hvd).items():
        name = f"removed.{entry}"
        expect_raise_on(comm, members, ValueError, lambda: fn(np.arange(4.0), name, ps), (name,), what=f"{entry} on a removed set")
    with pytest.raises(ValueError):
        hvd.remove_process_set(ps)  # twice
    with pytest.raises(ValueError):
        hvd.remove_process_set(hvd.global_process_set)
    # the other sets are untouched; the same ranks form a new set (the removed object re-added, too)
    again = hvd.add_process_set(members)
    assert again.process_set_id not in (None, 0)
    ps2 = hvd.add_process_set(ps)
    assert ps2 is ps and ps.process_set_id not in (None, 0, again.process_set_id)
    gather_and_compare(comm, (old_id, again.process_set_id, ps.process_set_id), "ids after re-adding")
    for s in (again, ps):
        if s.included():
            x = make_rank_inputs(("after.remove", s.process_set_id), "int64", (4,), "Sum", "wide", s.size())
            check_result(hvd.allreduce(x[s.rank()], op=hvd.Sum, name="rm.x", process_set=s), x, "Sum", True, what="re-added set")
    for sname, s in member_sets(hvd, sets):
        x = make_rank_inputs(("others.after.remove", sname), "int32", (4,), "Min", "wide", s.size())
        check_result(hvd.allreduce(x[s.rank()], op=hvd.Min, name="rm.x", process_set=s), x, "Min", True, what=f"set {sname} after a removal")
    hvd.remove_process_set(again)
    hvd.remove_process_set(ps)
    done(comm, True)


@needs_two_ranks
def test_collectives_pending_on_a_removed_set_fail(env, comm):
    """Each member has submitted a collective on the set the other members never submit;
    removing the set fails them (HoroError naming the tensor) instead of leaving them hanging."""
    hvd, sets = env
    rank, size = hvd.rank(), hvd.size()
    ps = hvd.add_process_set([0, size - 1])
    handles = []
    if ps.included():
        me = ps.rank()
        handles.append((f"pending.ar.{me}", hvd.allreduce_async(np.ones(3), name=f"pending.ar.{me}", process_set=ps)))
        handles.append((f"pending.ag.{me}", hvd.allgather_async(np.ones(2), name=f"pending.ag.{me}", process_set=ps)))
        time.sleep(0.2)  # let the engine see them
        for name, h in handles:
            assert not hvd.poll(h), f"{name} completed although only one member submitted it"
    hvd.remove_process_set(ps)
    for name, h in handles:
        name_, msg, exc = outcome_of(lambda: hvd.synchronize(h))
        assert isinstance(exc, hvd.HoroError), f"{name} pending on a removed set: got {name_ or 'no exception'}: {msg}"
        assert name in msg, f"{name}: the error should name the tensor: {msg}"
    # the engine works afterwards, on the global set and on the remaining sets
    x = make_rank_inputs("after.pending", "int64", (5,), "Sum", "wide", size)
    check_result(hvd.allreduce(x[rank], op=hvd.Sum, name="after.pending"), x, "Sum", True, what="global after removal")
    for sname, s in member_sets(hvd, sets, with_global=False):
        y = make_rank_inputs(("after.pending", sname), "int64", (5,), "Sum", "wide", s.size())
        check_result(hvd.allreduce(y[s.rank()], op=hvd.Sum, name="after.pending", process_set=s), y, "Sum", True, what=sname)
    done(comm, True)


def test_everything_still_works_at_the_end(env, comm):
    """After all the errors above: every set and the global set, concurrently once more."""
    test_async_collectives_on_every_set_and_the_global_set_in_flight_at_once(env, comm)


# ------------------------------------------------------------------ unnamed tensors (launched on their own: -k unnamed)


@needs_two_ranks
def test_unnamed_collectives_on_a_set_then_on_the_global_set(env, comm):
    """Auto-generated names must stay consistent across ranks when only some ranks
    run unnamed collectives on a process set (a per-rank counter shared by all sets
    would give the next global collective different names on members and non-members)."""
    hvd, sets = env
    rank, size = hvd.rank(), hvd.size()
    ps = min((s for s in sets.values() if s.size() < size), key=lambda s: (s.size(), s.ranks))
    if ps.included():
        n, me = ps.size(), ps.rank()
        x = make_rank_inputs("unnamed.set", "int64", (3,), "Sum", "wide", n)
        check_result(hvd.allreduce(x[me], op=hvd.Sum, process_set=ps), x, "Sum", True, what="unnamed allreduce on a set")
        hvd.barrier(process_set=ps)
        g = [data("unnamed.ag", "int32", (i + 1,), i) for i in range(n)]
        assert_same(hvd.allgather(g[me], process_set=ps), np.concatenate(g), "unnamed allgather on a set")
    y = make_rank_inputs("unnamed.global", "int64", (3,), "Sum", "wide", size)
    check_result(hvd.allreduce(y[rank], op=hvd.Sum), y, "Sum", True, what="unnamed allreduce on the global set afterwards")
    b = [data("unnamed.bc", "float32", (2,), r) for r in range(size)]
    assert_same(hvd.broadcast(b[rank], size - 1), b[size - 1], "unnamed broadcast on the global set afterwards")
    hvd.barrier()
    # unnamed collectives on every set this rank is in (the sets overlap), then globally again
    for sname, s in member_sets(hvd, sets, with_global=False):
        z = make_rank_inputs(("unnamed.each", sname), "int32", (4,), "Max", "wide", s.size())
        check_result(hvd.allreduce(z[s.rank()], op=hvd.Max, process_set=s), z, "Max", True, what=f"unnamed allreduce on set {sname}")
    hvd.barrier()
    done(comm, True)
