"""The "horo" torch.distributed backend, op by op, inside each MPI rank: every operation
the backend advertises against a NumPy reference built from every rank's seeded input,
sync and async (Work.wait and get_future), on the world group and on process-set
subgroups, with uneven splits; point-to-point; and errors that raise on every rank.

Runs inside each MPI rank (see conftest.py in this folder); np = 2 and 4.
"""
import datetime

import numpy as np
import pytest
import torch
import torch.distributed as dist

import horo.torch  # noqa: F401 - registers the backend

from rank_helpers import expect_raise_on_every_rank

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16]


@pytest.fixture(scope="module", autouse=True)
def world():
    # Nothing but the backend's name: horo supplies rank, world size and the store.
    dist.init_process_group("horo")
    yield
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def n():
    return dist.get_world_size()


@pytest.fixture(scope="module")
def me():
    return dist.get_rank()


def data(rank, shape, dtype, seed=0, low=1, high=4):
    """Rank `rank`'s seeded input, rebuilt identically on every rank for the reference."""
    rng = np.random.default_rng(1000 * seed + rank)
    a = rng.integers(low, high, size=shape) if not dtype.is_floating_point else rng.uniform(low, high, size=shape)
    return torch.from_numpy(np.asarray(a)).to(dtype)


def ref(values, op):
    """NumPy reference of a reduction over ranks, in float64 / int64 (torch casts back)."""
    stack = np.stack([v.double().numpy() if v.dtype.is_floating_point else v.long().numpy() for v in values])
    folds = {R.SUM: np.sum, R.AVG: np.mean, R.MIN: np.min, R.MAX: np.max, R.PRODUCT: np.prod,
             R.BAND: np.bitwise_and.reduce, R.BOR: np.bitwise_or.reduce, R.BXOR: np.bitwise_xor.reduce}
    return folds[op](stack, 0)


def close(got, expected, dtype):
    got = got.double().numpy() if got.dtype.is_floating_point else got.long().numpy()
    tol = {torch.float16: 1e-2, torch.bfloat16: 3e-2}.get(dtype, 1e-6)
    if dtype.is_floating_point:
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, np.asarray(expected).astype(got.dtype))


def finish(work, async_op, use_future):
    """Completes an async op through wait() or its future; a sync op returned None."""
    if not async_op:
        assert work is None
        return None
    if use_future:
        return work.get_future().wait()
    assert work.wait()
    return None


MODES = [(False, False), (True, False), (True, True)]
MODE_IDS = ["sync", "wait", "future"]


# --- all_reduce --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("op", [R.SUM, R.AVG, R.MIN, R.MAX, R.PRODUCT], ids=lambda o: str(o).split(".")[-1])
@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64, torch.uint8], ids=str)
def test_all_reduce(n, me, dtype, op, mode):
    if op == R.AVG and not dtype.is_floating_point:
        pytest.skip("AVG of integers: torch's backends define it for floating point only")
    shape = (5, 3)
    t = data(me, shape, dtype, seed=1)
    work = dist.all_reduce(t, op=op, async_op=mode[0])
    value = finish(work, *mode)
    close(t, ref([data(r, shape, dtype, seed=1) for r in range(n)], op), dtype)
    if mode[1]:
        assert value[0] is t  # DDP's hooks read the future's value as [tensor]


def test_all_reduce_premul_sum(n, me):
    t = data(me, (7,), torch.float32, seed=2)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    close(t, 0.5 * ref([data(r, (7,), torch.float32, seed=2) for r in range(n)], R.SUM), torch.float32)


@pytest.mark.parametrize("op", [R.BAND, R.BOR, R.BXOR], ids=lambda o: str(o).split(".")[-1])
@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.int64], ids=str)
def test_all_reduce_bitwise(n, me, dtype, op):
    t = data(me, (6,), dtype, seed=3, low=0, high=64)
    work = dist.all_reduce(t, op=op, async_op=True)
    work.wait()
    close(t, ref([data(r, (6,), dtype, seed=3, low=0, high=64) for r in range(n)], op), dtype)


def test_all_reduce_bitwise_on_floats_names_the_op():
    with pytest.raises(TypeError, match="BAND"):
        dist.all_reduce(torch.ones(2), op=R.BAND)


def test_all_reduce_bool_is_logical(n, me):
    t = torch.tensor([me == 0, True, False])
    dist.all_reduce(t, op=R.MAX)
    assert t.tolist() == [True, True, False]
    t = torch.tensor([me == 0, True, False])
    dist.all_reduce(t, op=R.MIN)
    assert t.tolist() == [n == 1, True, False]


def test_all_reduce_non_contiguous(n, me):
    base = data(me, (4, 6), torch.float32, seed=4)
    view = base.t()  # non-contiguous: reduced through a copy, written back
    dist.all_reduce(view)
    close(base, ref([data(r, (4, 6), torch.float32, seed=4) for r in range(n)], R.SUM), torch.float32)


@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
def test_all_reduce_coalesced(n, me, async_op):
    shapes = [(3,), (2, 2), (5,)]
    ts = [data(me, s, torch.float32, seed=10 + i) for i, s in enumerate(shapes)]
    work = dist.all_reduce_coalesced(ts, op=R.MAX, async_op=async_op)
    if async_op:
        work.wait()
    for i, (t, s) in enumerate(zip(ts, shapes)):
        close(t, ref([data(r, s, torch.float32, seed=10 + i) for r in range(n)], R.MAX), torch.float32)


def test_all_reduce_in_coalescing_manager(n, me):
    from torch.distributed.distributed_c10d import _coalescing_manager

    ts = [data(me, (4,), torch.float64, seed=20 + i) for i in range(3)]
    with _coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for i, t in enumerate(ts):
        close(t, ref([data(r, (4,), torch.float64, seed=20 + i) for r in range(n)], R.SUM), torch.float64)


def test_coalescing_manager_with_a_device_waits_for_every_operation(n, me):
    from torch.distributed.distributed_c10d import _coalescing_manager

    ts = [data(me, (1 << 16,), torch.float32, seed=25 + i) for i in range(3)]
    with _coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for i, t in enumerate(ts):
        close(t, ref([data(r, (1 << 16,), torch.float32, seed=25 + i) for r in range(n)], R.SUM), torch.float32)


def test_future_then_chains(n, me):
    t = torch.ones(3) * (me + 1)
    fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    assert fut.wait().tolist() == [float(n * (n + 1))] * 3


# --- broadcast and reduce ------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool], ids=str)
def test_broadcast_from_every_root(n, me, dtype, mode):
    for root in range(n):
        t = data(me, (3, 4), dtype, seed=30 + root, low=0, high=2)
        work = dist.broadcast(t, src=root, async_op=mode[0])
        finish(work, *mode)
        assert torch.equal(t, data(root, (3, 4), dtype, seed=30 + root, low=0, high=2))


@pytest.mark.parametrize("op", [R.SUM, R.MAX, R.PRODUCT], ids=lambda o: str(o).split(".")[-1])
@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
def test_reduce_to_every_root(n, me, op, async_op):
    for root in range(n):
        t = data(me, (5,), torch.float64, seed=40)
        mine = t.clone()
        work = dist.reduce(t, dst=root, op=op, async_op=async_op)
        if async_op:
            work.wait()
        if me == root:
            close(t, ref([data(r, (5,), torch.float64, seed=40) for r in range(n)], op), torch.float64)
        else:
            assert torch.equal(t, mine)  # a non-root's tensor is left as it was


# --- all-gathers ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16], ids=str)
def test_all_gather(n, me, dtype, mode):
    outs = [torch.empty((2, 3), dtype=dtype) for _ in range(n)]
    work = dist.all_gather(outs, data(me, (2, 3), dtype, seed=50), async_op=mode[0])
    finish(work, *mode)
    for r in range(n):
        assert torch.equal(outs[r], data(r, (2, 3), dtype, seed=50))


@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
def test_all_gather_into_tensor_concatenated_and_stacked(n, me, async_op):
    x = data(me, (3, 2), torch.float32, seed=51)
    expected = torch.cat([data(r, (3, 2), torch.float32, seed=51) for r in range(n)])
    for out in (torch.empty((3 * n, 2)), torch.empty((n, 3, 2))):
        work = dist.all_gather_into_tensor(out, x, async_op=async_op)
        if async_op:
            work.wait()
        assert torch.equal(out.reshape(3 * n, 2), expected)


def test_all_gather_coalesced(n, me):
    xs = [data(me, (2,), torch.float32, seed=52), data(me, (3, 1), torch.float32, seed=53)]
    outs = [[torch.empty_like(x) for _ in range(n)] for x in xs]
    dist.all_gather_coalesced(outs, xs)
    for i, seed in enumerate((52, 53)):
        for r in range(n):
            assert torch.equal(outs[i][r], data(r, xs[i].shape, torch.float32, seed=seed))


def test_all_gather_into_tensor_in_coalescing_manager(n, me):
    from torch.distributed.distributed_c10d import _coalescing_manager

    xs = [data(me, (4,), torch.float32, seed=54 + i) for i in range(2)]
    outs = [torch.empty(4 * n) for _ in xs]
    with _coalescing_manager(async_ops=True) as cm:
        for out, x in zip(outs, xs):
            dist.all_gather_into_tensor(out, x)
    cm.wait()
    for i, out in enumerate(outs):
        assert torch.equal(out, torch.cat([data(r, (4,), torch.float32, seed=54 + i) for r in range(n)]))


# --- gather and scatter ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
def test_gather_to_every_root(n, me, async_op):
    for root in range(n):
        x = data(me, (2, 2), torch.int64, seed=60)
        outs = [torch.empty((2, 2), dtype=torch.int64) for _ in range(n)] if me == root else None
        work = dist.gather(x, outs, dst=root, async_op=async_op)
        if async_op:
            work.wait()
        if me == root:
            for r in range(n):
                assert torch.equal(outs[r], data(r, (2, 2), torch.int64, seed=60))


@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
def test_scatter_from_every_root(n, me, async_op):
    for root in range(n):
        parts = [data(root * 10 + r, (3,), torch.float32, seed=61) for r in range(n)] if me == root else None
        out = torch.empty(3)
        work = dist.scatter(out, parts, src=root, async_op=async_op)
        if async_op:
            work.wait()
        assert torch.equal(out, data(root * 10 + me, (3,), torch.float32, seed=61))


# --- reduce-scatters -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", [R.SUM, R.AVG, R.MAX], ids=lambda o: str(o).split(".")[-1])
@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
def test_reduce_scatter(n, me, op, async_op):
    inputs = [data(me * n + j, (2, 3), torch.float32, seed=70) for j in range(n)]
    out = torch.empty((2, 3))
    work = dist.reduce_scatter(out, inputs, op=op, async_op=async_op)
    if async_op:
        work.wait()
    close(out, ref([data(r * n + me, (2, 3), torch.float32, seed=70) for r in range(n)], op), torch.float32)


@pytest.mark.parametrize("op", [R.SUM, R.AVG, R.MIN], ids=lambda o: str(o).split(".")[-1])
@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
def test_reduce_scatter_tensor(n, me, op, async_op):
    x = data(me, (n * 3, 2), torch.float64, seed=71)
    out = torch.empty((3, 2), dtype=torch.float64)
    work = dist.reduce_scatter_tensor(out, x, op=op, async_op=async_op)
    if async_op:
        work.wait()
    full = ref([data(r, (n * 3, 2), torch.float64, seed=71) for r in range(n)], op)
    close(out, full[me * 3:(me + 1) * 3], torch.float64)


def test_reduce_scatter_tensor_in_coalescing_manager(n, me):
    from torch.distributed.distributed_c10d import _coalescing_manager

    xs = [data(me, (n * 2,), torch.float32, seed=72 + i) for i in range(2)]
    outs = [torch.empty(2) for _ in xs]
    with _coalescing_manager(async_ops=True) as cm:
        for out, x in zip(outs, xs):
            dist.reduce_scatter_tensor(out, x)
    cm.wait()
    for i, out in enumerate(outs):
        full = ref([data(r, (n * 2,), torch.float32, seed=72 + i) for r in range(n)], R.SUM)
        close(out, full[me * 2:(me + 1) * 2], torch.float32)


# --- all-to-all -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
def test_all_to_all_single_even(n, me, async_op):
    x = data(me, (2 * n, 3), torch.float32, seed=80)
    out = torch.empty((2 * n, 3))
    work = dist.all_to_all_single(out, x, async_op=async_op)
    if async_op:
        work.wait()
    expected = torch.cat([data(r, (2 * n, 3), torch.float32, seed=80)[2 * me:2 * me + 2] for r in range(n)])
    assert torch.equal(out, expected)


@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
def test_all_to_all_single_uneven_splits(n, me, async_op):
    # Rank r sends (r + j) % 3 rows to rank j (some zero).
    def splits_of(r):
        return [(r + j) % 3 for j in range(n)]

    mine = splits_of(me)
    x = data(me, (sum(mine), 2), torch.int64, seed=81)
    received = [splits_of(r)[me] for r in range(n)]
    out = torch.empty((sum(received), 2), dtype=torch.int64)
    work = dist.all_to_all_single(out, x, output_split_sizes=received, input_split_sizes=mine, async_op=async_op)
    if async_op:
        work.wait()
    parts = []
    for r in range(n):
        s = splits_of(r)
        start = sum(s[:me])
        parts.append(data(r, (sum(s), 2), torch.int64, seed=81)[start:start + s[me]])
    assert torch.equal(out, torch.cat(parts))


def test_all_to_all_lists_of_different_shapes(n, me):
    inputs = [data(me * n + j, (j + 1, 2), torch.float32, seed=82) for j in range(n)]
    outputs = [torch.empty((me + 1, 2)) for _ in range(n)]
    dist.all_to_all(outputs, inputs)
    for r in range(n):
        assert torch.equal(outputs[r], data(r * n + me, (me + 1, 2), torch.float32, seed=82))


# --- barriers ------------------------------------------------------------------------------------------------------------

def test_barrier_sync_and_async():
    dist.barrier()
    work = dist.barrier(async_op=True)
    assert work.wait()


def test_monitored_barrier_through_the_group_method(me):
    group = dist.group.WORLD
    group.monitored_barrier(datetime.timedelta(seconds=30))
    # torch 2.13's dist.monitored_barrier() takes gloo groups only, before asking the backend.
    with pytest.raises(ValueError, match="GLOO"):
        dist.monitored_barrier()


# --- object collectives -----------------------------------------------------------------------------------------------------

def test_object_collectives(n, me):
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": me, "list": list(range(me))})
    assert objs == [{"rank": r, "list": list(range(r))} for r in range(n)]

    box = [f"from {me}", me] if me == n - 1 else [None, None]
    dist.broadcast_object_list(box, src=n - 1)
    assert box == [f"from {n - 1}", n - 1]

    gathered = [None] * n if me == 0 else None
    dist.gather_object(("g", me), gathered, dst=0)
    if me == 0:
        assert gathered == [("g", r) for r in range(n)]

    out = [None]
    dist.scatter_object_list(out, [{"to": r} for r in range(n)] if me == 0 else None, src=0)
    assert out == [{"to": me}]

    if n >= 2 and me in (0, 1):
        if me == 0:
            dist.send_object_list([{"p2p": 1}, "x" * 1000], dst=1)
        else:
            got = [None, None]
            dist.recv_object_list(got, src=0)
            assert got == [{"p2p": 1}, "x" * 1000]


# --- point-to-point --------------------------------------------------------------------------------------------------------

def test_ring_of_isend_irecv_beside_collectives(n, me):
    nxt, prv = (me + 1) % n, (me - 1) % n
    x = data(me, (1000,), torch.float32, seed=90)
    y = torch.empty(1000)
    send, recv = dist.isend(x, nxt), dist.irecv(y, prv)
    s = torch.ones(4)
    dist.all_reduce(s)  # a collective while the ring is in flight
    send.wait()
    recv.wait()
    assert torch.equal(y, data(prv, (1000,), torch.float32, seed=90))
    assert s.tolist() == [float(n)] * 4


def test_batch_isend_irecv_is_one_work(n, me):
    nxt, prv = (me + 1) % n, (me - 1) % n
    xs = [data(me, (k + 1,), torch.float64, seed=91 + k) for k in range(3)]
    ys = [torch.empty(k + 1, dtype=torch.float64) for k in range(3)]
    ops = [dist.P2POp(dist.isend, x, nxt) for x in xs] + [dist.P2POp(dist.irecv, y, prv) for y in ys]
    works = dist.batch_isend_irecv(ops)
    assert len(works) == 1  # one horo batch call for the whole list
    works[0].wait()
    for k, y in enumerate(ys):
        assert torch.equal(y, data(prv, (k + 1,), torch.float64, seed=91 + k))


def test_same_tag_messages_arrive_in_send_order(n, me):
    if n < 2 or me > 1:
        return
    if me == 0:
        works = [dist.isend(torch.full((3,), float(i)), dst=1, tag=5) for i in range(6)]
        for w in works:
            w.wait()
    else:
        got = []
        for _ in range(6):
            y = torch.empty(3)
            dist.recv(y, src=0, tag=5)
            got.append(y[0].item())
        assert got == [float(i) for i in range(6)]


def test_send_recv_non_contiguous_and_tags(n, me):
    if n < 2 or me > 1:
        return
    if me == 0:
        base = torch.arange(12.0).reshape(3, 4)
        dist.send(base.t(), dst=1, tag=2)  # staged through a contiguous copy
        dist.send(torch.tensor([7]), dst=1, tag=3)
    else:
        b = torch.empty(1, dtype=torch.int64)
        a = torch.empty(4, 3)
        wb = dist.irecv(b, src=0, tag=3)  # posted first, matched by tag
        dist.recv(a, src=0, tag=2)
        wb.wait()
        assert torch.equal(a, torch.arange(12.0).reshape(3, 4).t())
        assert b.item() == 7


def test_recv_from_any_source_is_not_implemented():
    with pytest.raises(NotImplementedError, match="any source"):
        dist.recv(torch.empty(1))


# --- groups ---------------------------------------------------------------------------------------------------------------

def test_new_group_on_a_process_set(n, me):
    evens = [r for r in range(n) if r % 2 == 0]
    odds = [r for r in range(n) if r % 2 == 1]
    g_even = dist.new_group(evens)
    g_odd = dist.new_group(odds) if odds else None
    group, members = (g_even, evens) if me % 2 == 0 else (g_odd, odds)
    assert dist.get_backend(group) == "horo"
    t = data(me, (4,), torch.float32, seed=100)
    work = dist.all_reduce(t, group=group, async_op=True)
    work.wait()
    close(t, ref([data(r, (4,), torch.float32, seed=100) for r in members], R.SUM), torch.float32)
    # Roots and peers are group ranks in torch: the group's last member broadcasts.
    b = torch.full((2,), float(me))
    dist.broadcast(b, group_src=len(members) - 1, group=group)
    assert b.tolist() == [float(members[-1])] * 2
    outs = [torch.empty(1) for _ in members]
    dist.all_gather(outs, torch.tensor([float(me)]), group=group)
    assert [o.item() for o in outs] == [float(r) for r in members]
    if len(members) >= 2 and dist.get_rank(group) < 2:
        peer = 1 - dist.get_rank(group)
        y = torch.empty(1)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.tensor([float(me)]), group=group, group_peer=peer),
                                        dist.P2POp(dist.irecv, y, group=group, group_peer=peer)])
        works[0].wait()
        assert y.item() == float(members[peer])


def test_new_subgroups(n, me):
    size = 2 if n % 2 == 0 else 1
    sub, _ = dist.new_subgroups(group_size=size)
    t = torch.tensor([float(me)])
    dist.all_reduce(t, group=sub)
    first = me - me % size
    assert t.item() == float(sum(range(first, first + size)))


def test_device_mesh_dimensions(n, me):
    from torch.distributed.device_mesh import init_device_mesh

    if n % 2:
        pytest.skip("a 2-D mesh needs an even world")
    mesh = init_device_mesh("cpu", (2, n // 2), mesh_dim_names=("dp", "tp"))
    grid = np.arange(n).reshape(2, n // 2)
    row, col = np.argwhere(grid == me)[0]
    for dim, members in (("dp", grid[:, col]), ("tp", grid[row, :])):
        group = mesh.get_group(dim)
        assert dist.get_backend(group) == "horo"
        t = torch.tensor([float(me) + 1])
        dist.all_reduce(t, group=group)
        assert t.item() == float(sum(members) + len(members)), dim


def test_gloo_group_beside_horo_shares_the_store(n, me):
    gloo = dist.new_group(backend="gloo")
    assert dist.get_backend(gloo) == "gloo"
    t = torch.tensor([float(me)])
    dist.all_reduce(t, group=gloo)
    assert t.item() == float(sum(range(n)))
    store = dist.distributed_c10d._get_default_store()
    store.set(f"from{me}", str(me * 7))
    dist.barrier()
    assert [int(store.get(f"from{r}")) for r in range(n)] == [r * 7 for r in range(n)]


# --- errors raise on every rank ----------------------------------------------------------------------------------------------

def test_shape_mismatch_raises_on_every_rank(comm, me):
    t = torch.ones(3 + me)
    expect_raise_on_every_rank(comm, RuntimeError, lambda: dist.all_reduce(t), what="all_reduce of ragged shapes")
    outs = [torch.empty(2 + me) for _ in range(comm.Get_size())]
    expect_raise_on_every_rank(comm, (RuntimeError, ValueError),
                               lambda: dist.all_gather(outs, torch.ones(2 + me)), what="all_gather of ragged shapes")
    dist.all_reduce(torch.ones(2))  # the group still works


def test_dtype_mismatch_raises_on_every_rank(comm, me):
    t = torch.ones(3, dtype=torch.float32 if me == 0 else torch.float64)
    expect_raise_on_every_rank(comm, RuntimeError, lambda: dist.all_reduce(t, async_op=True).wait(),
                               what="all_reduce of differing dtypes")


def test_bad_output_splits_raise_on_every_rank(comm, n, me):
    x = torch.ones(n, 2)
    out = torch.empty(n + (1 if me == 0 else 0), 2)
    wrong = [1] * n if me != 0 else [2] + [1] * (n - 1)
    expect_raise_on_every_rank(comm, ValueError,
                               lambda: dist.all_to_all_single(out, x, output_split_sizes=wrong, input_split_sizes=[1] * n),
                               must_contain=["all_to_all_single"], what="all_to_all_single with wrong output splits")


def test_unsupported_op_names_itself(comm):
    expect_raise_on_every_rank(comm, NotImplementedError,
                               lambda: dist.reduce_scatter_tensor(torch.empty(1, dtype=torch.int32),
                                                                  torch.ones(comm.Get_size(), dtype=torch.int32),
                                                                  op=R.BAND),
                               must_contain=["reduce_scatter_tensor", "BAND"], what="reduce_scatter with BAND")
    dist.barrier()


# --- CUDA -------------------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch (a CPU build, or no GPU)")
def test_cuda_tensors_through_horos_gpu_path(n, me):
    device = torch.device("cuda", me % torch.cuda.device_count())
    t = data(me, (1000,), torch.float32, seed=110).to(device)
    dist.all_reduce(t)
    close(t.cpu(), ref([data(r, (1000,), torch.float32, seed=110) for r in range(n)], R.SUM), torch.float32)
    b = torch.full((8,), float(me), device=device)
    dist.broadcast(b, src=0)
    assert b.cpu().tolist() == [0.0] * 8
    y = torch.empty(8, device=device)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, b + me, (me + 1) % n),
                                    dist.P2POp(dist.irecv, y, (me - 1) % n)])  # staged through the host
    works[0].wait()
    assert y.cpu().tolist() == [float((me - 1) % n)] * 8
