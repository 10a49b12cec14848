"""Point-to-point (horo.send / recv / isend / irecv / batch_isend_irecv), inside each MPI rank.

Every received buffer is compared bit for bit with the data its sender built (each rank can
rebuild any rank's message from (sender, receiver, tag, index)). Covers: a ring at every dtype,
same-tag ordering of many messages of different sizes, tags matched independently, transfers
interleaved with collectives on the background thread, a batch exchange with every peer,
process sets, torch tensors, size mismatches raising on both sides, bad arguments raising at
the call, and a wait interrupted by a signal that can be waited on again.
"""
import signal

import ml_dtypes
import numpy as np
import pytest

import horo
from rank_helpers import expect_raise_on_every_rank

DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, ml_dtypes.bfloat16, np.float32, np.float64,
          np.bool_]


def message(sender, receiver, tag, index=0, count=37, dtype=np.float32):
    """The message `sender` sends `receiver`: distinct for every argument, same on every rank."""
    rng = np.random.default_rng([sender, receiver, tag, index, count])
    raw = rng.integers(0, 256, size=count * np.dtype(dtype).itemsize, dtype=np.uint8)
    if dtype == np.bool_:
        raw = raw & 1
    return raw.view(dtype)


@pytest.fixture(scope="module", autouse=True)
def initialised():
    horo.init()
    yield


def ring_peers():
    r, n = horo.rank(), horo.size()
    return (r + 1) % n, (r - 1) % n


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_ring_every_dtype(dtype):
    nxt, prv = ring_peers()
    me = horo.rank()
    out = message(me, nxt, 5, dtype=dtype)
    got = np.zeros_like(out)
    hs = horo.isend(out, nxt, tag=5)
    hr = horo.irecv(got, prv, tag=5)
    assert horo.synchronize(hr) is got
    assert horo.synchronize(hs) is None
    np.testing.assert_array_equal(got.view(np.uint8), message(prv, me, 5, dtype=dtype).view(np.uint8))


@pytest.mark.parametrize("count", [0, 1, 4097, 3 << 20])
def test_ring_sizes(count):
    nxt, prv = ring_peers()
    me = horo.rank()
    got = np.empty(count, np.float32)
    handle = horo.batch_isend_irecv([horo.P2POp("send", message(me, nxt, 1, count=count), nxt, 1),
                                     horo.P2POp("recv", got, prv, 1)])
    horo.synchronize(handle)
    np.testing.assert_array_equal(got, message(prv, me, 1, count=count))


def test_same_tag_arrives_in_send_order():
    # Every rank sends 40 messages of varying sizes to its successor, all posted before any
    # receive: they must come out in the order they were sent.
    nxt, prv = ring_peers()
    me = horo.rank()
    sizes = [(i * 7919) % 5000 for i in range(40)]
    outs = [message(me, nxt, 2, i, count=c) for i, c in enumerate(sizes)]
    sends = [horo.isend(o, nxt, tag=2) for o in outs]
    gots = [np.empty(c, np.float32) for c in sizes]
    recvs = [horo.irecv(g, prv, tag=2) for g in gots]
    for h in recvs + sends:
        horo.synchronize(h)
    for i, g in enumerate(gots):
        np.testing.assert_array_equal(g, message(prv, me, 2, i, count=sizes[i]))


def test_tags_match_independently():
    # Sent in tag order 10, 11, 12; received in the reverse order.
    nxt, prv = ring_peers()
    me = horo.rank()
    sends = [horo.isend(message(me, nxt, t), nxt, tag=t) for t in (10, 11, 12)]
    for t in (12, 11, 10):
        got = horo.recv(np.empty(37, np.float32), prv, tag=t)
        np.testing.assert_array_equal(got, message(prv, me, t))
    for h in sends:
        horo.synchronize(h)


def test_interleaved_with_collectives():
    # Collectives run on the background thread while transfers are posted and waited for on
    # this one, in a different order on even and odd ranks: neither may wait for the other.
    nxt, prv = ring_peers()
    me, n = horo.rank(), horo.size()
    for step in range(20):
        grads = [horo.allreduce_async(np.full(1000 + i, me + step, np.float64), name=f"g{i}", op=horo.Sum)
                 for i in range(4)]
        got = np.empty(37, np.float32)
        if me % 2:
            hr = horo.irecv(got, prv, tag=3)
            hs = horo.isend(message(me, nxt, 3, step), nxt, tag=3)
        else:
            hs = horo.isend(message(me, nxt, 3, step), nxt, tag=3)
            hr = horo.irecv(got, prv, tag=3)
        bcast = horo.broadcast(np.full(10, me, np.int32), root_rank=step % n, name="b")
        horo.synchronize(hr)
        horo.synchronize(hs)
        np.testing.assert_array_equal(got, message(prv, me, 3, step))
        np.testing.assert_array_equal(bcast, np.full(10, step % n, np.int32))
        for i, h in enumerate(grads):
            expected = sum(np.full(1000 + i, r + step, np.float64) for r in range(n))
            np.testing.assert_array_equal(horo.synchronize(h), expected)


def test_batch_exchange_with_every_peer():
    me, n = horo.rank(), horo.size()
    ops, gots = [], {}
    for peer in range(n):
        gots[peer] = np.empty(100 + peer + me, np.int64)
        ops.append(horo.P2POp("recv", gots[peer], peer, 4))
        ops.append(horo.P2POp("send", message(me, peer, 4, count=100 + me + peer, dtype=np.int64), peer, 4))
    assert horo.synchronize(horo.batch_isend_irecv(ops)) is None
    for peer, got in gots.items():
        np.testing.assert_array_equal(got, message(peer, me, 4, count=100 + me + peer, dtype=np.int64))


@pytest.mark.skipif(__import__("mpi4py.MPI", fromlist=["MPI"]).COMM_WORLD.Get_size() < 3, reason="needs 3 ranks")
def test_process_set_peers_are_global_ranks():
    # A set of ranks {0, 2}: rank 0 and 2 trade messages within it; others are not members.
    ps = horo.add_process_set([0, 2])
    try:
        me = horo.rank()
        if me in (0, 2):
            peer = 2 - me
            got = np.empty(37, np.float32)
            h = horo.batch_isend_irecv([horo.P2POp("send", message(me, peer, 6), peer, 6),
                                        horo.P2POp("recv", got, peer, 6)], process_set=ps)
            horo.synchronize(h)
            np.testing.assert_array_equal(got, message(peer, me, 6))
            with pytest.raises(ValueError, match="rank 1 is not in process set"):
                horo.send(np.zeros(1), 1, process_set=ps)
        else:
            with pytest.raises(ValueError, match="not in"):
                horo.send(np.zeros(1), 0, process_set=ps)
    finally:
        horo.remove_process_set(ps)


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    import horo.torch as hvd

    nxt, prv = ring_peers()
    me = horo.rank()
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        out = torch.arange(50, dtype=torch.float32).to(dtype) * (me + 1)
        got = torch.zeros(50, dtype=dtype)
        hs = hvd.isend(out, nxt, tag=8)
        assert hvd.recv(got, prv, tag=8) is got
        hvd.synchronize(hs)
        assert torch.equal(got, torch.arange(50, dtype=torch.float32).to(dtype) * (prv + 1))
    # Blocking calls of plain CPU tensors take the core's lane; the rest are checked as before.
    for dtype in (torch.float32, torch.int8):
        got = torch.zeros(3, 5, dtype=dtype)
        if me % 2 == 0:
            hvd.send(torch.full((3, 5), me + 1).to(dtype), nxt, tag=10)
            hvd.recv(got, prv, tag=10)
        else:
            hvd.recv(got, prv, tag=10)
            hvd.send(torch.full((3, 5), me + 1).to(dtype), nxt, tag=10)
        assert torch.equal(got, torch.full((3, 5), prv + 1).to(dtype))
    with pytest.raises(ValueError, match="contiguous"):
        hvd.irecv(torch.zeros(4, 4).t(), prv)
    with pytest.raises(ValueError, match="contiguous"):
        hvd.recv(torch.zeros(4, 4).t(), prv)


def test_size_mismatch_raises_on_both_sides(comm):
    # Pairs (0, 1), (2, 3): the sender sends 8 elements, the receiver expects 4, then the reverse.
    me, n = horo.rank(), horo.size()
    if n < 2:
        pytest.skip("needs two ranks")
    pair_comm = comm.Split(0 if me < (n // 2) * 2 else 1, me)
    if me >= (n // 2) * 2:
        pytest.skip("no partner")
    peer = me ^ 1
    for send_count, recv_count in ((8, 4), (4, 8)):
        def transfer():
            if me % 2 == 0:
                horo.send(np.zeros(send_count, np.float32), peer, tag=9, name="weights")
            else:
                horo.recv(np.zeros(recv_count, np.float32), peer, tag=9, name="weights")
        expect_raise_on_every_rank(pair_comm, horo.HorovodInternalError, transfer,
                                   must_contain=("weights", "agree on its size"), what="size mismatch")
    # Unnamed, each side's error names its own call as Python would ("send.to1.tag9", "recv.from0.tag9").
    def unnamed():
        if me % 2 == 0:
            horo.send(np.zeros(8, np.float32), peer, tag=9)
        else:
            horo.recv(np.zeros(4, np.float32), peer, tag=9)
    expect_raise_on_every_rank(pair_comm, horo.HorovodInternalError, unnamed,
                               must_contain=(f"{peer}.tag9'", "agree on its size"), what="unnamed size mismatch")
    # The pair still works afterwards.
    got = np.empty(37, np.float32)
    horo.synchronize(horo.batch_isend_irecv([horo.P2POp("send", message(me, peer, 9), peer, 9),
                                             horo.P2POp("recv", got, peer, 9)]))
    np.testing.assert_array_equal(got, message(peer, me, 9))


def test_bad_arguments_raise_at_the_call():
    n = horo.size()
    with pytest.raises(ValueError, match="rank 99 is not in process set 0"):
        horo.send(np.zeros(1), 99)
    with pytest.raises(ValueError, match="tag -1 is outside"):
        horo.isend(np.zeros(1), 0, tag=-1)
    with pytest.raises(TypeError, match="peer rank must be an int"):
        horo.isend(np.zeros(1), 0.0)
    with pytest.raises(ValueError, match="not contiguous"):
        horo.irecv(np.zeros((4, 4)).T, n - 1)
    readonly = np.zeros(4)
    readonly.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        horo.irecv(readonly, 0)
    # The blocking calls check as the non-blocking ones do (their lane takes plain arrays only).
    with pytest.raises(ValueError, match="read-only"):
        horo.recv(readonly, 0)
    with pytest.raises(ValueError, match="not contiguous"):
        horo.recv(np.zeros((4, 4)).T, n - 1)
    with pytest.raises(TypeError, match="tag must be an int"):
        horo.send(np.zeros(1), 0, tag="7")
    with pytest.raises(ValueError, match="'send' or 'recv'"):
        horo.batch_isend_irecv([horo.P2POp("put", np.zeros(1), 0)])


def test_wait_interrupted_by_a_signal_can_be_resumed(comm):
    if horo.size() < 2:
        pytest.skip("needs two ranks")
    me = horo.rank()

    class Alarm(Exception):
        pass

    def ring(*_):
        raise Alarm()

    if me == 1:
        got = np.empty(37, np.float32)
        handle = horo.irecv(got, 0, tag=11)
        previous = signal.signal(signal.SIGALRM, ring)
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        try:
            with pytest.raises(Alarm):
                horo.synchronize(handle)  # nothing was sent yet
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    comm.Barrier()  # rank 1's wait has been interrupted: now rank 0 sends
    if me == 0:
        horo.send(message(0, 1, 11), 1, tag=11)
    if me == 1:
        assert horo.synchronize(handle) is got
        np.testing.assert_array_equal(got, message(0, 1, 11))
